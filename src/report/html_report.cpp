#include "report/html_report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "attnsuite/error.hpp"
#include "core/atomic_file.hpp"
#include "report/sinks.hpp"
#include "report/table.hpp"
#include "report/tuning_table.hpp"

namespace attnsuite::report {

namespace fs = std::filesystem;
using bench::CaseStatus;
using bench::ResultRow;

namespace {

constexpr std::string_view kBottleneckRule =
    "Bottleneck: with t_compute = FLOPs / compute ceiling and t_memory = minimum bytes / memory ceiling, "
    "a case is latency-bound when max(t_compute, t_memory) is below the device's launch time (the "
    "smallest timed operation), else compute-bound when t_compute >= t_memory (intensity at or above "
    "the ridge), else memory-bound (docs/methodology.md, \"Profile\").";

constexpr std::string_view kCss = R"css(
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d1f23; margin: 0; background: #f6f7f9; }
main { max-width: 1280px; margin: 0 auto; padding: 24px 28px 48px; background: #fff; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 18px; margin: 32px 0 10px; padding-bottom: 4px; border-bottom: 1px solid #dde1e6; }
p.meta { color: #5b6270; margin: 0 0 16px; }
p.note { color: #5b6270; font-size: 13px; }
table { border-collapse: collapse; margin: 8px 0 12px; font-size: 13px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e6e8ec; text-align: left; vertical-align: top; }
th { background: #f0f2f5; font-weight: 600; position: sticky; top: 0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.span { color: #8a5300; }
td:nth-child(-n+2) { white-space: nowrap; }
tbody + tbody { border-top: 2px solid #c9ced6; }
.scroll { overflow-x: auto; }
figure { margin: 18px 0 28px; }
figure svg { max-width: 100%; height: auto; }
figcaption { color: #5b6270; font-size: 13px; margin-top: 4px; }
dl.counts { display: flex; gap: 18px; margin: 8px 0; }
dl.counts div { background: #f0f2f5; border-radius: 6px; padding: 6px 12px; }
dl.counts dt { font-size: 12px; color: #5b6270; } dl.counts dd { margin: 0; font-size: 18px; font-weight: 600; }
)css";

struct Counts {
  std::size_t ok = 0, skipped = 0, failed = 0;
};

Counts count_rows(const std::vector<ResultRow>& rows) {
  Counts c;
  for (const ResultRow& r : rows) {
    c.ok += r.status == CaseStatus::Ok;
    c.skipped += r.status == CaseStatus::Skipped;
    c.failed += r.status == CaseStatus::Failed;
  }
  return c;
}

// (field, value) rows of the machine a run was measured on; empty values left out.
TextTable machine_table(const bench::RunHeader& h) {
  TextTable table({{"machine", Align::Left}, {"", Align::Left}});
  const auto add = [&](std::string_view field, const std::string& value) {
    if (!value.empty()) table.add_row({std::string(field), value});
  };
  add("host", h.hostname);
  add("CPU", h.cpu_model);
  if (h.cpu_threads > 0) add("CPU threads", std::to_string(h.cpu_threads));
  add("SIMD", h.simd);
  add("GPU", h.gpu_name);
  add("NVIDIA driver", h.gpu_driver);
  add("CUDA runtime", h.cuda_version);
  // cuDNN is a GPU library: a file from a host without a GPU may still name the one linked.
  if (!h.gpu_name.empty()) add("cuDNN", h.cudnn_version);
  add("PyTorch", h.torch_version);
  add("attnsuite", h.tool_version);
  add("git commit", h.git_commit);
  add("suite", h.suite);
  add("started", h.started_at);
  add("finished", h.finished_at);
  if (h.interrupted) add("interrupted", "yes: the run ended early; its finished cases are here");
  if (h.settings.is_object()) {
    std::string settings;
    for (const auto& [key, value] : h.settings.items()) {
      if (value.is_object()) continue;
      settings += (settings.empty() ? "" : ", ") + key + " " + value.dump();
    }
    add("settings", settings);
  }
  return table;
}

TextTable ceilings_table(const bench::DeviceCeilings& c) {
  TextTable table({{"ceiling", Align::Left}, {"value", Align::Right}, {"how it was measured", Align::Left}});
  const auto add = [&](double value, std::string_view name, std::string_view unit, std::string how) {
    if (value > 0) table.add_row({std::string(name), fmt::format("{:.4g} {}", value, unit), std::move(how)});
  };
  const std::string gemm = c.gpu_gemm_shape.empty() ? std::string() : " " + c.gpu_gemm_shape;
  add(c.cpu_fp32_gflops, "CPU fp32 FMA", "GFLOP/s", "AVX2 FMA chains on every thread, best of 5 windows");
  add(c.host_copy_gbps, "host memory copy", "GB/s", "memcpy on every thread, bytes read + written, best of 5");
  add(c.cpu_dispatch_us, "CPU dispatch", "µs", "fastest empty parallel_for over every thread");
  add(c.gpu_copy_gbps, "GPU memory copy", "GB/s", "device-to-device copy of 1 GiB, bytes read + written, best of 10");
  add(c.gpu_fp16_tflops, "GPU fp16 GEMM", "TFLOP/s", "cuBLAS GEMM" + gemm + ", fp32 accumulate, best of 10");
  add(c.gpu_bf16_tflops, "GPU bf16 GEMM", "TFLOP/s", "cuBLAS GEMM" + gemm + ", fp32 accumulate, best of 10");
  add(c.gpu_fp8_tflops, "GPU fp8 GEMM", "TFLOP/s", "cuBLASLt e4m3 GEMM" + gemm + ", fp32 accumulate, best of 10");
  add(c.gpu_launch_us, "GPU launch", "µs", "fastest event-timed 1-byte memset");
  return table;
}

TextTable backends_table(const std::vector<BackendNote>& notes) {
  TextTable table({{"backend", Align::Left},
                   {"name", Align::Left},
                   {"peer of", Align::Left},
                   {"device", Align::Left},
                   {"what it is", Align::Left, 70}});
  for (const BackendNote& n : notes)
    table.add_row({n.name, n.display_name, n.peer_of.empty() ? "— (attnsuite's own)" : n.peer_of, n.device, n.what});
  return table;
}

std::string title_of(const ReportDocument& d) {
  std::string title = "attnsuite report";
  if (!d.header.suite.empty()) title += " — " + d.header.suite;
  return title;
}

std::string meta_line(const ReportDocument& d) {
  std::string line = d.source;
  const auto& h = d.header;
  if (!h.started_at.empty()) line += " · " + h.started_at;
  if (!h.gpu_name.empty()) {
    line += " · " + h.gpu_name;
  } else if (!h.cpu_model.empty()) {
    line += " · " + h.cpu_model;
  }
  if (!h.git_commit.empty()) line += " · commit " + h.git_commit;
  return line;
}

std::string counts_line(const ReportDocument& d) {
  const Counts c = count_rows(d.rows);
  return fmt::format("{} cases: {} ok, {} skipped, {} failed", d.rows.size(), c.ok, c.skipped, c.failed);
}

// "for batches 1..1024, memory at most 40 GiB, p95 at most 5 ms, checked by an exhaustive sweep".
std::string tuning_limits(const bench::RunHeader& header) {
  const auto it = header.settings.find("tune");
  if (it == header.settings.end() || !it->is_object()) return "under the limits of the run";
  const auto& t = *it;
  std::string text = fmt::format("for batches {}..{}", t.value("min_batch", 1), t.value("max_batch", 0));
  text += t.contains("max_memory_gib") && t["max_memory_gib"].is_number()
              ? fmt::format(", memory at most {:.4g} GiB", t["max_memory_gib"].get<double>())
              : ", memory limited by the device";
  text += t.contains("p95_ms") && t["p95_ms"].is_number()
              ? fmt::format(", p95 at most {:.4g} ms", t["p95_ms"].get<double>())
              : ", no p95 target";
  if (t.value("exhaustive", false)) text += ", checked by an exhaustive sweep";
  return text;
}

std::string replace_all(std::string text, std::string_view from, std::string_view to) {
  for (std::size_t at = text.find(from); at != std::string::npos; at = text.find(from, at + to.size()))
    text.replace(at, from.size(), to);
  return text;
}

}  // namespace

std::vector<BackendNote> backend_notes(const std::vector<ResultRow>& rows, Registry* registry) {
  std::vector<BackendNote> notes;
  std::set<std::string> seen;
  for (const ResultRow& row : rows) {
    if (!seen.insert(row.backend).second) continue;
    BackendNote note;
    note.name = row.backend;
    note.display_name = row.display_name;
    note.peer_of = row.peer_of;
    note.device = row.device;
    if (registry != nullptr && registry->contains(row.backend)) {
      Backend& backend = registry->find(row.backend);
      if (note.display_name.empty()) note.display_name = std::string(backend.display_name());
      if (note.peer_of.empty()) note.peer_of = std::string(backend.peer_of());
      note.what = backend.capabilities();
    } else {
      note.what = "(not in this build of attnsuite)";
    }
    notes.push_back(std::move(note));
  }
  return notes;
}

std::string inline_svg(std::string_view svg, std::string_view prefix) {
  std::string text(svg);
  if (const std::size_t start = text.find("<svg"); start != std::string::npos) text.erase(0, start);
  const std::string p(prefix);
  text = replace_all(std::move(text), " id=\"", " id=\"" + p + "-");
  text = replace_all(std::move(text), "url(#", "url(#" + p + "-");
  text = replace_all(std::move(text), "href=\"#", "href=\"#" + p + "-");
  return text;
}

std::string render_html(const ReportDocument& d) {
  std::string out = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n";
  out += "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n";
  out += "<title>" + escape_html(title_of(d)) + "</title>\n<style>" + std::string(kCss) + "</style>\n</head>\n";
  out += "<body>\n<main>\n<h1>" + escape_html(title_of(d)) + "</h1>\n";
  out += "<p class=\"meta\">" + escape_html(meta_line(d)) + "</p>\n";

  const Counts c = count_rows(d.rows);
  out += fmt::format(
      "<dl class=\"counts\"><div><dt>cases</dt><dd>{}</dd></div><div><dt>ok</dt><dd>{}</dd></div>"
      "<div><dt>skipped</dt><dd>{}</dd></div><div><dt>failed</dt><dd>{}</dd></div></dl>\n",
      d.rows.size(), c.ok, c.skipped, c.failed);

  out += "<h2 id=\"machine\">Machine</h2>\n<div class=\"scroll\">" + machine_table(d.header).html() + "</div>\n";
  const auto& k = d.header.ceilings;
  const bool measured = k.cpu_fp32_gflops > 0 || k.host_copy_gbps > 0 || k.gpu_copy_gbps > 0 || k.gpu_fp16_tflops > 0 ||
                        k.gpu_bf16_tflops > 0;
  const TextTable ceilings = ceilings_table(k);
  out += "<h2 id=\"ceilings\">Device ceilings</h2>\n";
  if (measured) {
    out += "<p class=\"note\">Measured once at the start of the run; every case's profile is a share of these.</p>\n";
    out += "<div class=\"scroll\">" + ceilings.html() + "</div>\n";
  } else {
    out += "<p class=\"note\">This file records no measured ceilings (written before they existed).</p>\n";
  }

  if (d.tuning.is_array() && !d.tuning.empty()) {
    out += "<h2 id=\"tuning\">Batch tuning</h2>\n<p class=\"note\">The batch of highest tokens/s " +
           escape_html(tuning_limits(d.header)) + "; evaluations are the distinct batches measured.</p>\n";
    out += "<div class=\"scroll\">" + tuning_table(d.tuning).html() + "</div>\n";
  }

  out += "<h2 id=\"results\">Results</h2>\n<div class=\"scroll\">" + summary_table(d.rows).html() + "</div>\n";
  if (has_profile(d.rows)) {
    out += "<h2 id=\"profile\">Profile</h2>\n<p class=\"note\">" + escape_html(kBottleneckRule) + "</p>\n";
    out += "<div class=\"scroll\">" + profile_table(d.rows).html() + "</div>\n";
  }

  if (d.comparison) {
    out += "<h2 id=\"compare\">Compared with another run</h2>\n<p class=\"note\">A = " + escape_html(d.compare_a) +
           "<br>B = " + escape_html(d.compare_b) +
           "<br>Flagged faster or slower beyond twice the measured noise.</p>\n";
    out += "<div class=\"scroll\">" + d.comparison->html + "</div>\n";
  }

  out += "<h2 id=\"plots\">Plots</h2>\n";
  if (d.plots.empty())
    out += "<p class=\"note\">" + escape_html(d.plots_note.empty() ? "No plots." : d.plots_note) + "</p>\n";
  for (const PlotFile& plot : d.plots) {
    out += "<figure id=\"plot-" + escape_html(plot.name) + "\">\n" + inline_svg(read_text_file(plot.svg), plot.name);
    out += "\n<figcaption><b>" + escape_html(plot.title) + ".</b> " + escape_html(plot.caption) +
           "</figcaption>\n</figure>\n";
  }

  out +=
      "<h2 id=\"backends\">Backends</h2>\n<p class=\"note\">Peers keep their own project's name; ours go by "
      "their registry name.</p>\n<div class=\"scroll\">" +
      backends_table(d.backends).html() + "</div>\n";
  out += "</main>\n</body>\n</html>\n";
  return out;
}

std::string render_markdown(const ReportDocument& d, const fs::path& markdown_path) {
  std::string out = "# " + title_of(d) + "\n\n" + meta_line(d) + "\n\n" + counts_line(d) + "\n\n";
  out += "## Machine\n\n" + machine_table(d.header).markdown() + "\n";
  out += "## Device ceilings\n\n" + ceilings_table(d.header.ceilings).markdown() + "\n";
  if (d.tuning.is_array() && !d.tuning.empty())
    out += "## Batch tuning\n\nThe batch of highest tokens/s " + tuning_limits(d.header) +
           "; evaluations are the distinct batches measured.\n\n" + tuning_table(d.tuning).markdown() + "\n";
  out += "## Results\n\n" + summary_table(d.rows).markdown() + "\n";
  if (has_profile(d.rows))
    out += "## Profile\n\n" + std::string(kBottleneckRule) + "\n\n" + profile_table(d.rows).markdown() + "\n";
  if (d.comparison)
    out += "## Compared with another run\n\nA = " + d.compare_a + "  \nB = " + d.compare_b + "\n\n" +
           d.comparison->markdown + "\n";
  if (!d.plots.empty()) {
    out += "## Plots\n\n";
    const fs::path base = fs::absolute(markdown_path).parent_path();
    for (const PlotFile& plot : d.plots) {
      out += fmt::format("![{}]({})\n\n*{}.* {}\n\n", plot.title, fs::relative(plot.png, base).generic_string(),
                         plot.title, plot.caption);
    }
  } else if (!d.plots_note.empty()) {
    out += "## Plots\n\n" + d.plots_note + "\n\n";
  }
  out += "## Backends\n\n" + backends_table(d.backends).markdown();
  return out;
}

}  // namespace attnsuite::report
