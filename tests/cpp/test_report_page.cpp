// The profile (ceilings, roofline class), the sampler, and the report page: HTML and Markdown
// rendered from committed results files (tests/data/report), plots made by matplotlib, and the
// tune command as a user runs it.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "attnsuite/registry.hpp"
#include "attnsuite/sampler.hpp"
#include "bench/profile.hpp"
#include "bench/result.hpp"
#include "core/atomic_file.hpp"
#include "report/html_report.hpp"
#include "report/load.hpp"
#include "report/plots.hpp"
#include "report/sinks.hpp"
#include "report/table.hpp"

namespace fs = std::filesystem;
using namespace attnsuite;

namespace {

const fs::path kData = fs::path(ATTNSUITE_TEST_DATA_DIR) / "report";

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("attnsuite_page_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::size_t count_of(const std::string& text, const std::string& piece) {
  std::size_t count = 0;
  for (std::size_t at = text.find(piece); at != std::string::npos; at = text.find(piece, at + 1)) ++count;
  return count;
}

struct CliResult {
  int code = -1;
  std::string out, err;
};

CliResult run_cli(const std::vector<std::string>& args, const fs::path& dir) {
  std::string command = std::string("'") + ATTNSUITE_CLI_PATH + "'";
  for (const auto& a : args) command += " '" + a + "'";
  command += " >'" + (dir / "stdout").string() + "' 2>'" + (dir / "stderr").string() + "'";
  const int status = std::system(command.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = report::read_text_file(dir / "stdout");
  r.err = report::read_text_file(dir / "stderr");
  return r;
}

// Plots need matplotlib; scripts/setup.sh installs it, so in CI its absence is a failure.
bool plots_available(std::string* why_not) {
  if (report::find_plot_python(why_not)) return true;
  const char* ci = std::getenv("CI");
  if (ci != nullptr && std::string(ci) == "true") ADD_FAILURE() << "CI must make plots, but: " << *why_not;
  return false;
}

report::ReportDocument document_for(const fs::path& file) {
  report::LoadedResults loaded = report::load_results(file);
  report::fill_relative_to_vanilla(loaded.rows);
  bench::apply_profile(loaded.rows, loaded.header.ceilings);
  report::ReportDocument d;
  d.source = file.filename().string();
  d.header = loaded.header;
  d.rows = loaded.rows;
  d.tuning = loaded.tuning;
  d.backends = report::backend_notes(d.rows, &Registry::global());
  return d;
}

}  // namespace

// --- profile ------------------------------------------------------------------------------

TEST(Profile, ClassifiesByTheRoofAndTheLaunchTime) {
  bench::Roof roof;
  roof.compute_flops_per_s = 100e12;  // ridge at 100 FLOP/byte
  roof.memory_bytes_per_s = 1e12;
  roof.launch_seconds = 5e-6;
  EXPECT_EQ(bench::classify(1e12, 1e9, roof), bench::Bottleneck::Compute);  // 10 ms vs 1 ms
  EXPECT_EQ(bench::classify(1e10, 1e9, roof), bench::Bottleneck::Memory);   // 0.1 ms vs 1 ms
  EXPECT_EQ(bench::classify(1e8, 1e6, roof), bench::Bottleneck::Latency);   // 1 µs each < 5 µs
  EXPECT_EQ(bench::classify(1e11, 1e9, roof), bench::Bottleneck::Compute);  // on the ridge
  roof.memory_bytes_per_s = 0;
  EXPECT_FALSE(bench::classify(1e12, 1e9, roof).has_value());
}

TEST(Profile, PicksTheCeilingOfTheRowsDeviceAndDtype) {
  bench::DeviceCeilings c;
  c.cpu_fp32_gflops = 200;
  c.host_copy_gbps = 20;
  c.gpu_copy_gbps = 4000;
  c.gpu_fp16_tflops = 700;
  c.gpu_bf16_tflops = 650;
  c.gpu_launch_us = 4;
  EXPECT_DOUBLE_EQ(bench::roof_for(c, "cpu", "fp16").compute_flops_per_s, 200e9);  // CPU computes in fp32
  EXPECT_DOUBLE_EQ(bench::roof_for(c, "cuda:0", "bf16").compute_flops_per_s, 650e12);
  EXPECT_DOUBLE_EQ(bench::roof_for(c, "cuda:1", "fp16").memory_bytes_per_s, 4000e9);
  EXPECT_FALSE(bench::roof_for(c, "cuda:0", "fp32").complete());  // no fp32 GEMM ceiling measured

  bench::ResultRow row;
  row.backend = "flash2";
  row.device = "cuda:0";
  row.dtype = "fp16";
  row.ms_median = 0.25;
  row.tflops = 350;  // 87.5 GFLOP in 0.25 ms
  row.gbps = 700;    // 175 MB: intensity 500 FLOP/byte > ridge 175
  bench::apply_profile(row, c);
  EXPECT_DOUBLE_EQ(*row.intensity, 500);
  EXPECT_DOUBLE_EQ(*row.compute_ceiling_pct, 50);
  EXPECT_DOUBLE_EQ(*row.memory_ceiling_pct, 17.5);
  EXPECT_EQ(row.bottleneck, "compute-bound");

  row.status = bench::CaseStatus::Failed;
  row.bottleneck.clear();
  bench::apply_profile(row, c);
  EXPECT_TRUE(row.bottleneck.empty());
}

TEST(Profile, CeilingsRoundTripAndOldHeadersKeepTheFmaPeak) {
  bench::RunHeader header;
  header.ceilings.cpu_fp32_gflops = 219.5;
  header.ceilings.gpu_fp8_tflops = 1450;
  header.ceilings.gpu_gemm_shape = "8192x8192x8192";
  const bench::RunHeader back = bench::header_from_json(nlohmann::json::parse(bench::to_json(header).dump()));
  EXPECT_DOUBLE_EQ(back.ceilings.cpu_fp32_gflops, 219.5);
  EXPECT_DOUBLE_EQ(back.ceilings.gpu_fp8_tflops, 1450);
  EXPECT_EQ(back.ceilings.gpu_gemm_shape, "8192x8192x8192");

  const bench::RunHeader old = bench::header_from_json({{"cpu_fp32_peak_gflops", 123.0}});
  EXPECT_DOUBLE_EQ(old.ceilings.cpu_fp32_gflops, 123.0);
  EXPECT_THROW(bench::header_from_json({{"ceilings", {{"gpu_copy_gbps", "fast"}}}}), Error);
}

TEST(Sampler, SummarizesKnownReadingsAndSkipsUnknownOnes) {
  const bench::SampleSummary s = bench::summarize_samples({{1980, 97}, {0, -1}, {1755, 100}, {1800, -1}});
  EXPECT_EQ(s.samples, 4);
  EXPECT_NEAR(*s.clock_mhz_mean, (1980 + 1755 + 1800) / 3.0, 1e-9);
  EXPECT_DOUBLE_EQ(*s.clock_mhz_min, 1755);
  EXPECT_DOUBLE_EQ(*s.gpu_util_pct_mean, 98.5);
  EXPECT_FALSE(bench::summarize_samples({{0, -1}}).clock_mhz_mean.has_value());
}

TEST(Sampler, ReadsOnItsThreadUntilStopped) {
  std::atomic<int> reads{0};
  bench::PeriodicSampler sampler(
      [&] {
        ++reads;
        return bench::DeviceSample{1000.0 + reads.load(), 50};
      },
      std::chrono::milliseconds(2));
  std::this_thread::sleep_for(std::chrono::milliseconds(40));
  const bench::SampleSummary s = sampler.stop();
  EXPECT_GE(s.samples, 5);  // the first, several periodic ones, the last
  EXPECT_EQ(s.samples, reads.load());
  EXPECT_DOUBLE_EQ(*s.clock_mhz_min, 1001);
  EXPECT_EQ(sampler.stop().samples, s.samples);  // a second stop changes nothing
}

// --- the page ---------------------------------------------------------------------------------

TEST(ReportPage, HtmlTableEscapesAndSpans) {
  report::TextTable table({{"a", report::Align::Left}, {"b", report::Align::Right}, {"c", report::Align::Left}});
  table.add_row({"<x & y>", "1.5", "\"q\""});
  table.add_separator();
  table.add_spanning_row({"skip"}, "head dim 96 < 128");
  const std::string html = table.html();
  EXPECT_NE(html.find("<td>&lt;x &amp; y&gt;</td><td class=\"num\">1.5</td><td>&quot;q&quot;</td>"), std::string::npos)
      << html;
  EXPECT_NE(html.find("<td class=\"span\" colspan=\"2\">head dim 96 &lt; 128</td>"), std::string::npos) << html;
  EXPECT_EQ(count_of(html, "<tbody>"), 2u);
}

TEST(ReportPage, InlineSvgPrefixesIdsAndReferences) {
  const std::string svg = R"svg(<?xml version="1.0"?>
<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "x.dtd">
<svg xmlns:xlink="http://www.w3.org/1999/xlink"><defs><path id="m1"/><clipPath id="p2"/></defs>
<g clip-path="url(#p2)"><use xlink:href="#m1"/></g></svg>)svg";
  const std::string out = report::inline_svg(svg, "fig");
  EXPECT_EQ(out.find("<?xml"), std::string::npos);
  EXPECT_EQ(out.find("DOCTYPE"), std::string::npos);
  EXPECT_EQ(out.rfind("<svg", 0), 0u);
  EXPECT_NE(out.find("id=\"fig-m1\""), std::string::npos);
  EXPECT_NE(out.find("url(#fig-p2)"), std::string::npos);
  EXPECT_NE(out.find("xlink:href=\"#fig-m1\""), std::string::npos);
}

TEST(ReportPage, RendersFromACommittedResultsFile) {
  report::ReportDocument d = document_for(kData / "cpu-small.json");
  ASSERT_FALSE(d.rows.empty());
  const auto baseline = report::load_results(kData / "cpu-small-baseline.json");
  d.comparison = report::compare_runs(baseline.rows, d.rows);
  d.compare_a = "cpu-small-baseline.json";
  d.compare_b = "cpu-small.json";
  d.plots_note = "Plots unavailable: test";
  const std::string html = report::render_html(d);

  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("<style>"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_EQ(html.find("src=\"http"), std::string::npos);
  EXPECT_EQ(html.find("<link"), std::string::npos);
  // Machine and ceilings from the header.
  EXPECT_NE(html.find(d.header.cpu_model), std::string::npos);
  EXPECT_NE(html.find(d.header.git_commit), std::string::npos);
  EXPECT_NE(html.find("host memory copy"), std::string::npos);
  EXPECT_NE(html.find("CPU fp32 FMA"), std::string::npos);
  // Every row in the results table, the profile with its rule, the comparison, the backends.
  // Both backends of the shape, in the results table and in the profile table.
  EXPECT_EQ(count_of(html, "<td>B1 H4/4 N128 d32 fp32</td>"), 4u);
  EXPECT_NE(html.find("id=\"profile\""), std::string::npos);
  EXPECT_NE(html.find("latency-bound when"), std::string::npos);
  EXPECT_NE(html.find("Compared with another run"), std::string::npos);
  EXPECT_NE(html.find(" same, "), std::string::npos);
  EXPECT_NE(html.find("Plots unavailable: test"), std::string::npos);
  Backend& flash = Registry::global().find("cpu-flash");
  EXPECT_NE(html.find(report::escape_html(flash.capabilities())), std::string::npos);
  // The cuDNN version only with a GPU: a header from a host without one may name the library linked.
  report::ReportDocument no_gpu = d;
  no_gpu.header.cudnn_version = "9.19.0";
  no_gpu.header.gpu_name.clear();
  EXPECT_EQ(report::render_html(no_gpu).find("9.19.0"), std::string::npos);
  no_gpu.header.gpu_name = "NVIDIA H200";
  EXPECT_NE(report::render_html(no_gpu).find("<td>9.19.0</td>"), std::string::npos);

  const fs::path dir = fresh_dir("markdown");
  const std::string markdown = report::render_markdown(d, dir / "report.md");
  EXPECT_EQ(markdown.rfind("# attnsuite report", 0), 0u);
  EXPECT_NE(markdown.find("## Profile"), std::string::npos);
  EXPECT_NE(markdown.find("| cpu-flash |"), std::string::npos);
  EXPECT_NE(markdown.find("## Compared with another run"), std::string::npos);
  fs::remove_all(dir);
}

TEST(ReportPage, RendersTheTuningOfATuneFile) {
  const report::ReportDocument d = document_for(kData / "cpu-tune.json");
  ASSERT_TRUE(d.tuning.is_array());
  ASSERT_EQ(d.tuning.size(), 2u);
  const std::string html = report::render_html(d);
  EXPECT_NE(html.find("Batch tuning"), std::string::npos);
  for (const auto& entry : d.tuning) {
    const int best = entry["search"]["best"]["batch"].get<int>();
    EXPECT_NE(html.find(fmt::format("<td class=\"num\">{}</td>", best)), std::string::npos);
  }
  EXPECT_NE(html.find("sweep evaluations"), std::string::npos);
}

TEST(ReportPage, PlotsAndTheHtmlPageFromTheCli) {
  std::string why_not;
  if (!plots_available(&why_not)) GTEST_SKIP() << why_not;
  const fs::path dir = fresh_dir("plots");
  const CliResult r = run_cli({"report", (kData / "cpu-small.json").string(), "--compare",
                               (kData / "cpu-small-baseline.json").string(), "--plots", (dir / "plots").string(),
                               "--html", (dir / "report.html").string(), "--markdown", (dir / "report.md").string()},
                              dir);
  ASSERT_EQ(r.code, 0) << r.err;
  const auto manifest = nlohmann::json::parse(report::read_text_file(dir / "plots" / "plots.json"));
  std::vector<std::string> names;
  for (const auto& plot : manifest) {
    names.push_back(plot["name"]);
    const std::string png = report::read_text_file(dir / "plots" / plot["png"].get<std::string>());
    EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8)) << plot["png"];
    EXPECT_GT(png.size(), 10000u);
    const std::string svg = report::read_text_file(dir / "plots" / plot["svg"].get<std::string>());
    EXPECT_NE(svg.find("<svg"), std::string::npos);
    EXPECT_NE(svg.find("</svg>"), std::string::npos);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"latency_vs_seq", "tflops_vs_seq", "memory_vs_seq", "speedup_vs_seq",
                                             "roofline", "accuracy_vs_speed"}));
  const std::string html = report::read_text_file(dir / "report.html");
  EXPECT_EQ(count_of(html, "<svg"), names.size());
  EXPECT_NE(html.find("id=\"roofline-"), std::string::npos);  // ids prefixed per plot
  const std::string markdown = report::read_text_file(dir / "report.md");
  EXPECT_NE(markdown.find("](plots/roofline.png)"), std::string::npos);

  // A tune file adds the tuner's curves.
  const CliResult tune =
      run_cli({"report", (kData / "cpu-tune.json").string(), "--plots", (dir / "tune").string()}, dir);
  ASSERT_EQ(tune.code, 0) << tune.err;
  EXPECT_TRUE(fs::exists(dir / "tune" / "tuner_throughput_vs_batch.png"));
  EXPECT_TRUE(fs::exists(dir / "tune" / "tuner_throughput_vs_batch.svg"));
  fs::remove_all(dir);
}

TEST(ReportPage, HtmlWithoutMatplotlibSaysWhy) {
  const fs::path dir = fresh_dir("nompl");
  ::setenv("ATTNSUITE_PYTHON", "/nonexistent/python3", 1);
  const CliResult r =
      run_cli({"report", (kData / "cpu-small.json").string(), "--html", (dir / "page.html").string()}, dir);
  const CliResult plots =
      run_cli({"report", (kData / "cpu-small.json").string(), "--plots", (dir / "p").string()}, dir);
  ::unsetenv("ATTNSUITE_PYTHON");
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("no Python 3 with matplotlib"), std::string::npos) << r.err;
  EXPECT_NE(report::read_text_file(dir / "page.html").find("Plots unavailable"), std::string::npos);
  EXPECT_EQ(plots.code, 2);  // a flag this machine cannot serve: usage, as --gpus without a GPU
  EXPECT_NE(plots.err.find("--plots: no Python 3 with matplotlib"), std::string::npos) << plots.err;
  fs::remove_all(dir);
}

// --- the tune command ---------------------------------------------------------------------------

TEST(TuneCli, TunesTheCpuBackendsAndWritesTheTable) {
  const fs::path dir = fresh_dir("tune");
  const CliResult r = run_cli({"tune",          "--batch",
                               "--backends",    "cpu-flash",
                               "--seq",         "64",
                               "--heads",       "2",
                               "--head-dim",    "32",
                               "--dtype",       "fp32",
                               "--max-batch",   "8",
                               "--max-time-ms", "20",
                               "--hot",         "--exhaustive",
                               "--out",         (dir / "out").string(),
                               "--cache",       (dir / "cache" / "backends.json").string()},
                              dir);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("tune cpu-flash"), std::string::npos) << r.err;  // progress, without -q
  // The backend cache that backend="auto" reads: this CPU, the class of the tuned shape.
  const auto cache = nlohmann::json::parse(report::read_text_file(dir / "cache" / "backends.json"));
  ASSERT_EQ(cache["machines"].size(), 1u) << cache.dump();
  EXPECT_EQ(cache["machines"][0]["driver"], "");
  const auto& tuned = cache["machines"][0]["classes"]["fp32 bshd d32 full mha q64 k64"];
  EXPECT_EQ(tuned["order"], nlohmann::json::array({"cpu-flash"})) << cache.dump();
  EXPECT_GT(tuned["tokens_per_s"]["cpu-flash"].get<double>(), 0);
  EXPECT_NE(r.out.find("1 shape class updated"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("best batch"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sweep evaluations"), std::string::npos) << r.out;
  const auto document = nlohmann::json::parse(report::read_text_file(dir / "out" / "tune.json"));
  ASSERT_EQ(document["tuning"].size(), 1u);
  const auto& entry = document["tuning"][0];
  EXPECT_EQ(entry["backend"], "cpu-flash");
  EXPECT_EQ(entry["seq_q"], 64);
  ASSERT_FALSE(entry["search"]["best"].is_null());
  EXPECT_EQ(entry["exhaustive"]["evaluations"], 8);
  EXPECT_EQ(document["rows"].size(), 8u);  // every batch 1..8 measured once, shared by search and sweep
  EXPECT_TRUE(fs::exists(dir / "out" / "tune.md"));
  EXPECT_GT(document["header"]["ceilings"]["host_copy_gbps"].get<double>(), 0);

  // The same directory again needs --force.
  const CliResult again = run_cli({"tune", "--batch", "--backends", "cpu-flash", "--out", (dir / "out").string()}, dir);
  EXPECT_EQ(again.code, 2);
  EXPECT_NE(again.err.find("--force"), std::string::npos);
  // -q: no progress and no table, the closing lines alone.
  const CliResult quiet = run_cli({"tune",    "--batch",   "--backends",  "cpu-flash",  "--seq",
                                   "64",      "--heads",   "2",           "--head-dim", "32",
                                   "--dtype", "fp32",      "--max-batch", "2",          "--max-time-ms",
                                   "5",       "--hot",     "-q",          "--out",      (dir / "out").string(),
                                   "--force", "--no-cache"},
                                  dir);
  EXPECT_EQ(quiet.code, 0) << quiet.err;
  EXPECT_EQ(quiet.out.find("best batch"), std::string::npos) << quiet.out;
  EXPECT_EQ(quiet.out.rfind("1 case tuned. Results in ", 0), 0u) << quiet.out;
  EXPECT_EQ(quiet.err, "");
  fs::remove_all(dir);
}

// A tune where no case could run or be tuned is not a success (README, "Exit codes": 3).
TEST(TuneCli, NothingToTuneIsExitCode3) {
  const fs::path dir = fresh_dir("tune_nothing");
  const CliResult batch = run_cli({"tune",
                                   "--batch",
                                   "--backends",
                                   "cpu-flash",
                                   "--seq",
                                   "64",
                                   "--heads",
                                   "2",
                                   "--head-dim",
                                   "7",
                                   "--dtype",
                                   "fp32",
                                   "--max-batch",
                                   "4",
                                   "--max-time-ms",
                                   "5",
                                   "-q",
                                   "--out",
                                   (dir / "batch").string(),
                                   "--no-cache"},
                                  dir);
  EXPECT_EQ(batch.code, 3) << batch.err;
  EXPECT_NE(batch.err.find("nothing ran: every case was skipped"), std::string::npos) << batch.err;
  EXPECT_TRUE(fs::exists(dir / "batch" / "tune.json"));
  // cpu-vanilla has no kernel configurations to choose from.
  const CliResult kernels = run_cli({"tune", "--kernels", "--backends", "cpu-vanilla", "--seq", "64", "--heads", "2",
                                     "--head-dim", "32", "--dtype", "fp32", "--max-time-ms", "5", "-q", "--out",
                                     (dir / "kernels").string(), "--kernel-cache", (dir / "kc.json").string()},
                                    dir);
  EXPECT_EQ(kernels.code, 3) << kernels.err;
  EXPECT_NE(kernels.err.find("nothing tuned"), std::string::npos) << kernels.err;
  fs::remove_all(dir);
}

TEST(TuneCli, BadUsageIsOneLineAndExitCode2) {
  const fs::path dir = fresh_dir("tune_usage");
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"tune"}, "tune needs --batch"},
           {{"tune", "--kernels", "--batch"}, "tune takes one of --batch, --kernels or --sparse, not several"},
           {{"tune", "--kernels", "--backends", "nope"}, "unknown backend 'nope'"},
           {{"tune", "--batch", "--min-batch", "0"}, "--min-batch 0 is not allowed: at least 1"},
           {{"tune", "--batch", "--max-batch", "4", "--min-batch", "8"}, "--max-batch 4 is not allowed"},
           {{"tune", "--batch", "--p95-ms", "-1"}, "--p95-ms -1 is not allowed"},
           {{"tune", "--batch", "--backends", "nope"}, "unknown backend 'nope'"},
       }) {
    const CliResult r = run_cli(args, dir);
    EXPECT_EQ(r.code, 2) << args.back() << ": " << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
    EXPECT_EQ(count_of(r.err, "\n"), 1u) << r.err;
  }
  fs::remove_all(dir);
}
