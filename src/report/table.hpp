// A text table rendered two ways: GitHub Markdown for files, aligned box-drawing text for the
// terminal. Used by the summary and the compare report.
#pragma once

#include <string>
#include <vector>

namespace attnsuite::report {

enum class Align { Left, Right };

struct TableColumn {
  std::string header;
  Align align = Align::Left;
  // Terminal only: longer cells wrap onto more lines (0: never). For free text such as reasons.
  std::size_t max_width = 0;
  // Terminal only: terminal(fit_width) may narrow this column (wrapping its cells) to fit.
  bool shrinks = false;
};

class TextTable {
 public:
  explicit TextTable(std::vector<TableColumn> columns);

  // One cell per column (missing trailing cells are empty).
  void add_row(std::vector<std::string> cells);
  // The first cells as usual, then one text over all remaining columns (a skipped case's
  // reason). In Markdown, which cannot span, the text goes into the last column.
  void add_spanning_row(std::vector<std::string> leading_cells, std::string text);
  // A horizontal rule in the terminal (between groups); nothing in Markdown.
  void add_separator();
  // Terminal: leave a column's cell blank when it equals the one above within a group, so a
  // group's shape is printed once. Markdown always repeats it (rows stay meaningful on their own).
  void set_collapse_repeats(std::size_t column) { collapse_column_ = column; }

  std::string markdown() const;
  // fit_width > 0: the columns marked `shrinks` are narrowed, widest first and not below their
  // header (or 12 columns), until the table is at most that wide (if it can be).
  std::string terminal(std::size_t fit_width = 0) const;
  // An HTML <table> (text escaped; a spanning row's text spans its columns; numbers' columns
  // right-aligned through the class "num"; separators start a new <tbody>).
  std::string html() const;

 private:
  struct Row {
    std::vector<std::string> cells;
    std::string span_text;
    bool spanning = false;
    bool separator = false;
  };
  std::vector<TableColumn> columns_;
  std::vector<Row> rows_;
  std::size_t collapse_column_ = static_cast<std::size_t>(-1);
};

// The width to fit terminal output to: the terminal's columns when stdout is one, else $COLUMNS,
// else `fallback`.
std::size_t terminal_columns(std::size_t fallback = 120);

// Display width of UTF-8 text in a terminal, counting each code point as one column (true for
// the characters we print: ASCII, ×, ±, –, …, box drawing).
std::size_t display_width(std::string_view text);

// Text with &, <, >, " escaped for HTML.
std::string escape_html(std::string_view text);

}  // namespace attnsuite::report
