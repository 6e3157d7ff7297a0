#include "report/table.hpp"

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdlib>
#include <string_view>
#include <utility>

namespace attnsuite::report {

namespace {

std::string escape_markdown(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '|') {
      out += "\\|";
    } else if (c == '\n' || c == '\r') {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::string repeat(std::string_view piece, std::size_t count) {
  std::string out;
  out.reserve(piece.size() * count);
  for (std::size_t i = 0; i < count; ++i) out += piece;
  return out;
}

std::string pad(std::string_view text, std::size_t width, Align align) {
  const std::size_t used = display_width(text);
  const std::string fill(width > used ? width - used : 0, ' ');
  return align == Align::Right ? fill + std::string(text) : std::string(text) + fill;
}

// Byte offset after the first `columns` code points of text.
std::size_t prefix_bytes(std::string_view text, std::size_t columns) {
  std::size_t seen = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) {
      if (seen == columns) return i;
      ++seen;
    }
  }
  return text.size();
}

// Greedy word wrap to lines of at most width columns; overlong words are cut.
std::vector<std::string> wrap(std::string_view text, std::size_t width) {
  std::vector<std::string> lines;
  std::string current;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t space = text.find_first_of(" \n", start);
    std::string_view word = text.substr(start, space == std::string_view::npos ? text.npos : space - start);
    start = space == std::string_view::npos ? text.size() : space + 1;
    if (word.empty()) continue;
    while (display_width(word) > width) {
      if (!current.empty()) lines.push_back(std::exchange(current, {}));
      const std::size_t cut = prefix_bytes(word, width);
      lines.emplace_back(word.substr(0, cut));
      word.remove_prefix(cut);
    }
    if (word.empty()) continue;
    if (!current.empty() && display_width(current) + 1 + display_width(word) > width) {
      lines.push_back(std::exchange(current, {}));
    }
    if (!current.empty()) current += ' ';
    current += word;
  }
  if (!current.empty() || lines.empty()) lines.push_back(current);
  return lines;
}

}  // namespace

std::size_t display_width(std::string_view text) {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

TextTable::TextTable(std::vector<TableColumn> columns) : columns_(std::move(columns)) {}

void TextTable::add_row(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back({std::move(cells), {}, false, false});
}

void TextTable::add_spanning_row(std::vector<std::string> leading_cells, std::string text) {
  leading_cells.resize(std::min(leading_cells.size(), columns_.size() - 1));
  rows_.push_back({std::move(leading_cells), std::move(text), true, false});
}

void TextTable::add_separator() {
  if (!rows_.empty() && !rows_.back().separator) rows_.push_back({{}, {}, false, true});
}

std::string TextTable::markdown() const {
  std::string out = "|";
  for (const auto& column : columns_) out += " " + escape_markdown(column.header) + " |";
  out += "\n|";
  for (const auto& column : columns_) out += column.align == Align::Right ? " ---: |" : " --- |";
  out += "\n";
  for (const Row& row : rows_) {
    if (row.separator) continue;
    out += "|";
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      std::string cell;
      if (row.spanning && c + 1 == columns_.size()) {
        cell = row.span_text;
      } else if (c < row.cells.size()) {
        cell = row.cells[c];
      }
      out += " " + escape_markdown(cell) + " |";
    }
    out += "\n";
  }
  return out;
}

std::string escape_html(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string TextTable::html() const {
  std::string out = "<table>\n<thead><tr>";
  for (const auto& column : columns_) {
    out += column.align == Align::Right ? "<th class=\"num\">" : "<th>";
    out += escape_html(column.header) + "</th>";
  }
  out += "</tr></thead>\n<tbody>\n";
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    const Row& row = rows_[r];
    if (row.separator) {
      if (r + 1 < rows_.size()) out += "</tbody>\n<tbody>\n";
      continue;
    }
    out += "<tr>";
    for (std::size_t c = 0; c < row.cells.size() && c < columns_.size(); ++c) {
      out += columns_[c].align == Align::Right ? "<td class=\"num\">" : "<td>";
      out += escape_html(row.cells[c]) + "</td>";
    }
    if (row.spanning) {
      out += fmt::format("<td class=\"span\" colspan=\"{}\">{}</td>", columns_.size() - row.cells.size(),
                         escape_html(row.span_text));
    }
    out += "</tr>\n";
  }
  return out + "</tbody>\n</table>\n";
}

std::size_t terminal_columns(std::size_t fallback) {
  winsize size{};
  if (isatty(STDOUT_FILENO) == 1 && ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  if (const char* columns = std::getenv("COLUMNS"); columns != nullptr) {
    std::size_t value = 0;
    const std::string_view text(columns);
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (error == std::errc() && end == text.data() + text.size() && value >= 20) return value;
  }
  return fallback;
}

std::string TextTable::terminal(std::size_t fit_width) const {
  const std::size_t count = columns_.size();
  // Cells as printed: repeats in the collapse column blanked within a group.
  std::vector<std::vector<std::string>> shown(rows_.size());
  {
    std::string previous;
    bool have_previous = false;
    for (std::size_t r = 0; r < rows_.size(); ++r) {
      if (rows_[r].separator) {
        have_previous = false;
        continue;
      }
      shown[r] = rows_[r].cells;
      if (collapse_column_ < shown[r].size()) {
        std::string& cell = shown[r][collapse_column_];
        if (have_previous && cell == previous) {
          cell.clear();
        } else {
          previous = cell;
          have_previous = true;
        }
      }
    }
  }

  std::vector<std::size_t> widths(count);
  for (std::size_t c = 0; c < count; ++c) widths[c] = display_width(columns_[c].header);
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    for (std::size_t c = 0; c < shown[r].size(); ++c) {
      std::size_t width = display_width(shown[r][c]);
      if (columns_[c].max_width > 0) width = std::min(width, columns_[c].max_width);
      widths[c] = std::max(widths[c], width);
    }
  }
  // Narrow the shrinkable columns to fit (`attnsuite list` was 480 columns wide): the widest
  // first, one column at a time, down to its header or kMinShrunk.
  if (fit_width > 0) {
    constexpr std::size_t kMinShrunk = 12;
    const auto total = [&] {
      std::size_t width = 1;
      for (const std::size_t w : widths) width += w + 3;
      return width;
    };
    for (std::size_t excess = total() > fit_width ? total() - fit_width : 0; excess > 0; --excess) {
      std::size_t widest = count;
      for (std::size_t c = 0; c < count; ++c) {
        const std::size_t floor = std::max(display_width(columns_[c].header), kMinShrunk);
        if (columns_[c].shrinks && widths[c] > floor && (widest == count || widths[c] > widths[widest])) widest = c;
      }
      if (widest == count) break;  // as narrow as it goes
      --widths[widest];
    }
  }
  // A spanning text wraps within the columns it covers; make sure that is not absurdly narrow.
  constexpr std::size_t kMinSpanWidth = 30;
  const auto span_width = [&](std::size_t first) {
    std::size_t width = 0;
    for (std::size_t c = first; c < count; ++c) width += widths[c];
    return width + 3 * (count - first - 1);
  };
  for (const Row& row : rows_) {
    if (!row.spanning) continue;
    const std::size_t first = row.cells.size();
    const std::size_t wanted = std::min(display_width(row.span_text), kMinSpanWidth);
    if (span_width(first) < wanted) widths.back() += wanted - span_width(first);
  }

  const auto rule = [&](std::string_view left, std::string_view middle, std::string_view right) {
    std::string line(left);
    for (std::size_t c = 0; c < count; ++c) {
      line += repeat("─", widths[c] + 2);
      line += c + 1 == count ? right : middle;
    }
    return line + "\n";
  };

  std::string out = rule("┌", "┬", "┐");
  out += "│";
  for (std::size_t c = 0; c < count; ++c) {
    out += " " + pad(columns_[c].header, widths[c], columns_[c].align) + " │";
  }
  out += "\n" + rule("├", "┼", "┤");
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    const Row& row = rows_[r];
    if (row.separator) {
      if (r + 1 < rows_.size()) out += rule("├", "┼", "┤");
      continue;
    }
    if (!row.spanning) {
      std::vector<std::vector<std::string>> cell_lines(count);
      std::size_t height = 1;
      for (std::size_t c = 0; c < count; ++c) {
        cell_lines[c] =
            display_width(shown[r][c]) > widths[c] ? wrap(shown[r][c], widths[c]) : std::vector{shown[r][c]};
        height = std::max(height, cell_lines[c].size());
      }
      for (std::size_t l = 0; l < height; ++l) {
        out += "│";
        for (std::size_t c = 0; c < count; ++c) {
          const std::string& text = l < cell_lines[c].size() ? cell_lines[c][l] : std::string();
          out += " " + pad(text, widths[c], columns_[c].align) + " │";
        }
        out += "\n";
      }
      continue;
    }
    const std::size_t first = row.cells.size();
    const std::vector<std::string> lines = wrap(row.span_text, span_width(first));  // never empty
    for (std::size_t l = 0; l < lines.size(); ++l) {
      out += "│";
      for (std::size_t c = 0; c < first; ++c) {
        const std::string text = l == 0 ? shown[r][c] : std::string();
        out += " " + pad(text, widths[c], columns_[c].align) + " │";
      }
      out += " " + pad(lines[l], span_width(first), Align::Left) + " │\n";
    }
  }
  out += rule("└", "┴", "┘");
  return out;
}

}  // namespace attnsuite::report
