// Result rows and the files and tables made of them: round trips, atomic writes, interrupted
// JSONL, relative-to-vanilla columns, summary tables and compare verdicts.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "attnsuite/error.hpp"
#include "bench/result.hpp"
#include "core/atomic_file.hpp"
#include "report/compare.hpp"
#include "report/jsonl.hpp"
#include "report/load.hpp"
#include "report/sinks.hpp"
#include "report/table.hpp"

namespace attnsuite {
namespace {

namespace fs = std::filesystem;
using bench::CaseStatus;
using bench::ResultRow;

ResultRow make_row(std::string backend, double ms_median, int seq = 1024) {
  ResultRow row;
  row.backend = std::move(backend);
  row.display_name = row.backend;
  row.device = "cpu";
  row.gpu = "Test CPU";
  row.dtype = "fp16";
  row.layout = "bshd";
  row.batch = 32;
  row.heads_q = 16;
  row.heads_kv = 16;
  row.seq_q = seq;
  row.seq_kv = seq;
  row.head_dim = 64;
  row.generator = "randn";
  row.seed = 7;
  row.ms_median = ms_median;
  row.ms_p05 = ms_median * 0.99;
  row.ms_p95 = ms_median * 1.01;
  row.ms_stddev = ms_median * 0.005;
  row.reps = 20;
  row.tokens_per_s = row.batch * seq / (ms_median * 1e-3);
  row.tflops = 1.5;
  row.peak_mem_mib = 10;
  row.rel_l1 = 1e-4;
  row.cos_sim = 0.999999;
  row.bottleneck = "compute-bound";
  return row;
}

// Every field set, including the awkward ones: NaN, infinity, a large seed, text to quote.
ResultRow full_row() {
  ResultRow row = make_row("torch-flash", 0.1 + 0.2);
  row.display_name = "FlashAttention-2 (PyTorch flash backend)";
  row.peer_of = "PyTorch";
  row.device = "cuda:0";
  row.gpu = "NVIDIA H200";
  row.causal = true;
  row.window_left = 128;
  row.window_right = 0;
  row.seed = std::numeric_limits<std::uint64_t>::max();
  row.ms_mean = 1.0 / 3.0;
  row.ms_min = 1e-300;
  row.gbps = 1234.5678901234567;
  row.mem_vs_vanilla = 0.25;
  row.speedup_vs_vanilla = 12.125;
  row.max_abs_err = std::numeric_limits<double>::infinity();
  row.rel_l2 = std::numeric_limits<double>::quiet_NaN();
  row.rmse = -std::numeric_limits<double>::infinity();
  row.accuracy_fraction = 1;
  row.clock_mhz = 1980;
  row.kernel_config = "m192";
  row.work_order = "paired";
  row.reason = "warning: a \"quoted\", comma-separated\nmulti-line note";
  return row;
}

// Rows compare through their column-ordered JSON text, where NaN is "nan".
std::string text_of(const ResultRow& row) { return bench::to_ordered_json(row).dump(); }

void expect_same_rows(const std::vector<ResultRow>& expected, const std::vector<ResultRow>& actual) {
  ASSERT_EQ(expected.size(), actual.size());
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(text_of(expected[i]), text_of(actual[i]));
}

void write_raw(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::string read_raw(const fs::path& path) { return report::read_text_file(path); }

class ReportFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ =
        fs::temp_directory_path() / fmt::format("attnsuite_report_{}_{}", info->name(), static_cast<long>(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ignored;
    fs::permissions(dir_ / "readonly", fs::perms::owner_all, ignored);
    fs::remove_all(dir_, ignored);
  }
  fs::path dir_;
};

template <class F>
std::string io_error_message(F&& action, ErrorKind kind = ErrorKind::Io) {
  try {
    action();
  } catch (const Error& error) {
    EXPECT_EQ(error.kind(), kind) << error.what();
    return error.what();
  }
  ADD_FAILURE() << "expected an attnsuite::Error";
  return {};
}

TEST(ResultRow, StatusNamesRoundTrip) {
  for (CaseStatus status : {CaseStatus::Ok, CaseStatus::Skipped, CaseStatus::Failed}) {
    EXPECT_EQ(bench::parse_case_status(bench::to_string(status)), status);
  }
  EXPECT_FALSE(bench::parse_case_status("OK").has_value());
}

TEST(ResultRow, ColumnsAreInOrderAndMatchJsonKeys) {
  const auto& columns = bench::result_columns();
  // 48 + the sparse kernels' predicted_sparsity, predictor_ms, effective_tflops + kernel_config,
  // work_order, backend_options, pass and the three gradients' max_abs_err, rel_l2, rel_l1, cos_sim.
  ASSERT_EQ(columns.size(), 67u);
  EXPECT_EQ(columns.front(), "backend");
  EXPECT_EQ(columns[2], "peer_of");
  EXPECT_EQ(columns.back(), "reason");
  const auto ordered = bench::to_ordered_json(full_row());
  std::vector<std::string> keys;
  for (const auto& item : ordered.items()) keys.push_back(item.key());
  EXPECT_EQ(keys, columns);
  EXPECT_EQ(bench::column_type("seed"), bench::ColumnType::Integer);
  EXPECT_EQ(bench::column_type("rel_l1"), bench::ColumnType::Number);
  EXPECT_FALSE(bench::column_type("no_such_column").has_value());
}

TEST(ResultRow, JsonRoundTripKeepsEveryField) {
  const ResultRow row = full_row();
  const nlohmann::json json = nlohmann::json::parse(bench::to_json(row).dump());
  EXPECT_TRUE(json["sparsity"].is_null());
  EXPECT_EQ(json["rel_l2"], "nan");
  const ResultRow back = bench::row_from_json(json);
  EXPECT_EQ(text_of(row), text_of(back));
  EXPECT_EQ(back.ms_median, 0.1 + 0.2);  // bit-exact
  EXPECT_TRUE(std::isnan(*back.rel_l2));
  EXPECT_FALSE(back.sparsity.has_value());
  EXPECT_EQ(row.case_key(), back.case_key());
}

TEST(ResultRow, MalformedRowsNameTheField) {
  nlohmann::json json = bench::to_json(make_row("cpu-flash", 1));
  json["some_future_column"] = {1, 2, 3};  // ignored
  EXPECT_NO_THROW(bench::row_from_json(json));

  auto bad = json;
  bad["batch"] = "thirty-two";
  EXPECT_NE(io_error_message([&] { bench::row_from_json(bad); }).find("'batch'"), std::string::npos);
  bad = json;
  bad["status"] = "fine";
  EXPECT_NE(io_error_message([&] { bench::row_from_json(bad); }).find("'status'"), std::string::npos);
  bad = json;
  bad["ms_median"] = true;
  EXPECT_NE(io_error_message([&] { bench::row_from_json(bad); }).find("'ms_median'"), std::string::npos);
  bad = json;
  bad.erase("backend");
  EXPECT_NE(io_error_message([&] { bench::row_from_json(bad); }).find("'backend'"), std::string::npos);
  io_error_message([&] { bench::row_from_json(nlohmann::json::array()); });
}

TEST(ResultRow, KeysSeparateBackendsAndInputs) {
  ResultRow a = make_row("cpu-flash", 1);
  ResultRow b = make_row("cpu-vanilla", 2);
  EXPECT_EQ(a.shape_key(), b.shape_key());
  EXPECT_NE(a.case_key(), b.case_key());
  for (auto change : std::vector<void (*)(ResultRow&)>{
           [](ResultRow& r) { r.dtype = "bf16"; }, [](ResultRow& r) { r.layout = "bhsd"; },
           [](ResultRow& r) { r.heads_kv = 4; }, [](ResultRow& r) { r.seq_kv = 4096; },
           [](ResultRow& r) { r.causal = true; }, [](ResultRow& r) { r.window_left = 64; },
           [](ResultRow& r) { r.generator = "outliers"; }, [](ResultRow& r) { r.seed = 8; }}) {
    ResultRow changed = a;
    change(changed);
    EXPECT_NE(changed.shape_key(), a.shape_key());
  }
  ResultRow timing_only = a;
  timing_only.ms_median = 5;
  EXPECT_EQ(timing_only.case_key(), a.case_key());
}

TEST(ResultRow, HeaderRoundTrip) {
  bench::RunHeader header;
  header.tool_version = "0.1.0";
  header.git_commit = "abc123";
  header.started_at = "2024-05-01T10:00:00Z";
  header.cpu_threads = 16;
  header.gpu_name = "NVIDIA H200";
  header.settings = {{"noise_target", 0.02}, {"warmup", 3}};
  header.interrupted = true;
  const bench::RunHeader back = bench::header_from_json(bench::to_json(header));
  EXPECT_EQ(bench::to_json(back), bench::to_json(header));
  io_error_message([] { bench::header_from_json({{"cpu_threads", "many"}}); });
}

TEST_F(ReportFiles, CsvRoundTripQuotesAndDigits) {
  ResultRow skipped = make_row("cpu-flash", 1, 2048);
  skipped.status = CaseStatus::Skipped;
  skipped.ms_median.reset();
  skipped.reason = "head dim 96 not supported; allowed: 64, 128";
  const std::vector<ResultRow> rows = {full_row(), make_row("cpu-vanilla", 12.345678901234), skipped};

  const std::string csv = report::to_csv(rows);
  EXPECT_EQ(csv.substr(0, csv.find('\n')), fmt::format("{}", fmt::join(bench::result_columns(), ",")));
  EXPECT_NE(csv.find("\"warning: a \"\"quoted\"\", comma-separated\nmulti-line note\""), std::string::npos);

  const fs::path path = dir_ / "results.csv";
  report::write_file_atomic(path, csv);
  const report::LoadedResults loaded = report::load_results(path);
  expect_same_rows(rows, loaded.rows);
  EXPECT_EQ(loaded.rows[0].reason, rows[0].reason);

  // CRLF line ends and reordered / unknown columns (a spreadsheet's export) read the same.
  const auto crlf =
      report::rows_from_csv("status,extra,backend,batch,ms_median\r\nok,x,cpu-flash,2,1.5\r\n", "crlf.csv");
  ASSERT_EQ(crlf.size(), 1u);
  EXPECT_EQ(crlf[0].batch, 2);
  EXPECT_EQ(crlf[0].ms_median, 1.5);
}

TEST_F(ReportFiles, MalformedCsvNamesFileAndLine) {
  const std::string header = "backend,status,batch\n";
  const std::string message =
      io_error_message([&] { report::rows_from_csv(header + "a,ok,1\nb,ok,many\n", "bad.csv"); });
  EXPECT_NE(message.find("bad.csv line 3"), std::string::npos) << message;
  EXPECT_NE(message.find("batch"), std::string::npos) << message;
  io_error_message([&] { report::rows_from_csv(header + "a,ok\n", "short.csv"); });
  io_error_message([&] { report::rows_from_csv(header + "\"a,ok,1\n", "open.csv"); });
  io_error_message([&] { report::rows_from_csv("name,batch\nx,1\n", "nobackend.csv"); });
}

TEST_F(ReportFiles, JsonFileRoundTrip) {
  bench::RunHeader header;
  header.hostname = "box";
  header.suite = "default";
  const std::vector<ResultRow> rows = {full_row(), make_row("cpu-flash", 2)};
  const nlohmann::json document = report::to_results_json(header, rows);
  ASSERT_EQ(document["rows"].size(), 2u);
  EXPECT_EQ(document["header"]["hostname"], "box");

  const fs::path path = dir_ / "results.json";
  report::write_file_atomic(path, report::results_json_text(header, rows));
  const report::LoadedResults loaded = report::load_results(path);
  EXPECT_EQ(loaded.header.suite, "default");
  expect_same_rows(rows, loaded.rows);
}

TEST_F(ReportFiles, JsonlSurvivesAnInterruptedLastLine) {
  const fs::path path = dir_ / "run.jsonl";
  bench::RunHeader header;
  header.suite = "seed";
  const std::vector<ResultRow> rows = {full_row(), make_row("cpu-flash", 2), make_row("cpu-vanilla", 9)};
  {
    report::JsonlWriter writer(path);
    writer.append_header(header);
    for (const ResultRow& row : rows) writer.append(row);
  }
  // A crash in the middle of the next line.
  const std::string line = bench::to_ordered_json(make_row("cpu-flash", 3, 4096)).dump();
  std::ofstream(path, std::ios::app) << line.substr(0, line.size() / 2);

  std::vector<std::string> warnings;
  bench::RunHeader read_header;
  expect_same_rows(rows, report::read_jsonl(path, &warnings, &read_header));
  EXPECT_EQ(read_header.suite, "seed");
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("line 5"), std::string::npos) << warnings[0];

  // Resuming cuts the partial line, so the next row starts on a line of its own.
  std::vector<ResultRow> resumed = rows;
  {
    report::JsonlWriter writer(path);
    EXPECT_EQ(writer.dropped_partial_bytes(), line.size() / 2);
    resumed.push_back(make_row("cpu-flash", 3, 4096));
    writer.append(resumed.back());
  }
  warnings.clear();
  expect_same_rows(resumed, report::read_jsonl(path, &warnings));
  EXPECT_TRUE(warnings.empty());
  EXPECT_EQ(report::load_results(path).rows.size(), 4u);
}

TEST_F(ReportFiles, JsonlCorruptMiddleLineIsAnError) {
  const fs::path path = dir_ / "corrupt.jsonl";
  const std::string good = bench::to_json(make_row("cpu-flash", 1)).dump();
  write_raw(path, good + "\n{\"backend\": \"cpu-fl\n" + good + "\n");
  const std::string message = io_error_message([&] { report::read_jsonl(path, nullptr); });
  EXPECT_NE(message.find("line 2"), std::string::npos) << message;

  // Valid JSON that is not a valid row is an error even on the last line.
  write_raw(path, good + "\n{\"backend\": \"x\", \"status\": \"done\"}\n");
  io_error_message([&] { report::read_jsonl(path, nullptr); });
}

TEST_F(ReportFiles, LoadRejectsMissingFilesAndUnknownFormats) {
  const std::string missing = io_error_message([&] { report::load_results(dir_ / "nope.json"); });
  EXPECT_NE(missing.find("nope.json"), std::string::npos);
  write_raw(dir_ / "results.txt", "hello");
  io_error_message([&] { report::load_results(dir_ / "results.txt"); }, ErrorKind::Usage);
  write_raw(dir_ / "broken.json", "{\"rows\": [");
  io_error_message([&] { report::load_results(dir_ / "broken.json"); });
  write_raw(dir_ / "wrong.json", "{\"rows\": [{\"backend\": 3, \"status\": \"ok\"}]}");
  io_error_message([&] { report::load_results(dir_ / "wrong.json"); });
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_F(ReportFiles, AtomicWriteReplacesAndLeavesNoTemporaries) {
  const fs::path path = dir_ / "out.csv";
  report::write_file_atomic(path, "first");
  report::write_file_atomic(path, "second, longer");
  EXPECT_EQ(read_raw(path), "second, longer");
  EXPECT_EQ(files_in(dir_), std::vector<std::string>{"out.csv"});
}

TEST_F(ReportFiles, FailedAtomicWriteLeavesTheTargetIntact) {
  // The parent is a regular file: no temporary can be created.
  write_raw(dir_ / "plain", "x");
  const std::string message = io_error_message([&] { report::write_file_atomic(dir_ / "plain" / "out.csv", "data"); });
  EXPECT_NE(message.find("plain/out.csv"), std::string::npos) << message;
  EXPECT_NE(message.find("Not a directory"), std::string::npos) << message;

  // The rename fails (the target is a non-empty directory): the target and its content survive
  // and the temporary is removed. Works as root too.
  fs::create_directories(dir_ / "target.json");
  write_raw(dir_ / "target.json" / "inside", "kept");
  io_error_message([&] { report::write_file_atomic(dir_ / "target.json", "new"); });
  EXPECT_EQ(read_raw(dir_ / "target.json" / "inside"), "kept");
  EXPECT_EQ(files_in(dir_), (std::vector<std::string>{"plain", "target.json"}));
}

TEST_F(ReportFiles, AtomicWriteIntoReadOnlyDirectoryKeepsOldContent) {
  if (::geteuid() == 0) GTEST_SKIP() << "root ignores directory permissions";
  const fs::path readonly = dir_ / "readonly";
  fs::create_directories(readonly);
  write_raw(readonly / "results.csv", "old content");
  fs::permissions(readonly, fs::perms::owner_read | fs::perms::owner_exec);
  io_error_message([&] { report::write_file_atomic(readonly / "results.csv", "new content"); });
  EXPECT_EQ(read_raw(readonly / "results.csv"), "old content");
  EXPECT_EQ(files_in(readonly), std::vector<std::string>{"results.csv"});
}

TEST_F(ReportFiles, EnsureWritableDirectory) {
  report::ensure_writable_directory(dir_ / "a" / "b");
  EXPECT_TRUE(fs::is_directory(dir_ / "a" / "b"));
  report::ensure_writable_directory(dir_ / "a" / "b");  // already there: fine
  write_raw(dir_ / "file", "x");
  io_error_message([&] { report::ensure_writable_directory(dir_ / "file"); });
  io_error_message([&] { report::ensure_writable_directory(dir_ / "file" / "sub"); });
}

TEST(Sinks, FillRelativeToVanilla) {
  ResultRow vanilla = make_row("cpu-vanilla", 10);
  vanilla.peak_mem_mib = 100;
  ResultRow flash = make_row("cpu-flash", 2);
  flash.peak_mem_mib = 10;
  ResultRow lonely = make_row("cpu-flash", 2, 4096);  // no vanilla on this shape
  ResultRow skipped = make_row("cpu-sage", 1);
  skipped.status = CaseStatus::Skipped;
  ResultRow gpu_vanilla = make_row("cuda-vanilla", 4);
  gpu_vanilla.device = "cuda:0";
  gpu_vanilla.peak_mem_mib = 0;  // unknown divisor: no memory ratio
  ResultRow gpu_flash = make_row("cuda-flash2", 1);
  gpu_flash.device = "cuda:0";

  std::vector<ResultRow> rows = {flash, vanilla, lonely, skipped, gpu_flash, gpu_vanilla};
  report::fill_relative_to_vanilla(rows);
  EXPECT_DOUBLE_EQ(*rows[0].speedup_vs_vanilla, 5.0);
  EXPECT_DOUBLE_EQ(*rows[0].mem_vs_vanilla, 0.1);
  EXPECT_DOUBLE_EQ(*rows[1].speedup_vs_vanilla, 1.0);
  EXPECT_DOUBLE_EQ(*rows[1].mem_vs_vanilla, 1.0);
  EXPECT_FALSE(rows[2].speedup_vs_vanilla.has_value());
  EXPECT_FALSE(rows[3].speedup_vs_vanilla.has_value());
  EXPECT_DOUBLE_EQ(*rows[4].speedup_vs_vanilla, 4.0);  // measured against cuda-vanilla, not cpu
  EXPECT_FALSE(rows[4].mem_vs_vanilla.has_value());
}

TEST(Sinks, Formatting) {
  EXPECT_EQ(report::format_si(7.0612e6), "7.06 M");
  EXPECT_EQ(report::format_si(123456), "123 k");
  EXPECT_EQ(report::format_si(999.7e3), "1.00 M");
  EXPECT_EQ(report::format_si(950), "950");
  EXPECT_EQ(report::format_ratio(12.08), "12.1×");
  EXPECT_EQ(report::format_ratio(9.996), "10.0×");
  EXPECT_EQ(report::format_ms(0.012345), "0.0123");
  EXPECT_EQ(report::shape_summary(make_row("x", 1)), "B32 H16/16 N1024 d64 fp16");
  ResultRow row = make_row("x", 1);
  row.seq_q = 1;
  row.causal = true;
  EXPECT_EQ(report::shape_summary(row), "B32 H16/16 N1/1024 d64 fp16 causal");
}

TEST(Sinks, SummaryTablesShowTheCells) {
  ResultRow vanilla = make_row("cpu-vanilla", 10);
  vanilla.peak_mem_mib = 100;
  ResultRow flash = make_row("cpu-flash", 0.8264);
  ResultRow peer = make_row("torch-flash", 0.5);
  peer.peer_of = "PyTorch";
  peer.display_name = "FlashAttention-2 (PyTorch flash backend)";
  ResultRow skipped = make_row("cpu-sage", 1, 2048);
  skipped.status = CaseStatus::Skipped;
  skipped.reason = "head dim 64 | fp16 not supported on the CPU";
  std::vector<ResultRow> rows = {vanilla, flash, skipped, peer};
  report::fill_relative_to_vanilla(rows);

  const std::string markdown = report::summary_markdown(rows);
  EXPECT_NE(markdown.find("| B32 H16/16 N1024 d64 fp16 | cpu-flash | 0.826 |"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("12.1×"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("10%"), std::string::npos) << markdown;
  EXPECT_NE(markdown.find("FlashAttention-2 (PyTorch flash backend)"), std::string::npos);
  EXPECT_NE(markdown.find("skipped: head dim 64 \\| fp16 not supported"), std::string::npos) << markdown;
  // Grouped by shape: the N2048 row comes after every N1024 row.
  EXPECT_GT(markdown.find("N2048"), markdown.find("PyTorch flash backend"));

  const std::string terminal = report::summary_terminal(rows);
  EXPECT_NE(terminal.find("│ B32 H16/16 N1024 d64 fp16"), std::string::npos) << terminal;
  EXPECT_NE(terminal.find("skipped: head dim 64 | fp16"), std::string::npos) << terminal;
  EXPECT_NE(terminal.find("3.28 M"), std::string::npos) << terminal;  // 32·1024 / 10 ms
  // Every line of the box has the same display width.
  std::size_t width = 0;
  for (std::size_t begin = 0; begin < terminal.size();) {
    const std::size_t end = terminal.find('\n', begin);
    const std::size_t line_width = report::display_width(terminal.substr(begin, end - begin));
    if (width == 0) width = line_width;
    EXPECT_EQ(line_width, width) << terminal;
    begin = end + 1;
  }
}

TEST(Compare, Verdicts) {
  const auto with_spread = [](ResultRow row, double relative_stddev) {
    row.ms_stddev = *row.ms_median * relative_stddev;
    return row;
  };
  ResultRow only_a = make_row("cpu-old", 5);
  ResultRow only_b = make_row("cpu-new", 5);
  ResultRow accuracy_a = make_row("cpu-sage", 4);
  ResultRow accuracy_b = make_row("cpu-sage", 4);
  accuracy_b.rel_l1 = 5e-4;  // 5× worse
  ResultRow failed_b = make_row("cpu-sparge", 3);
  failed_b.status = CaseStatus::Failed;
  failed_b.reason = "out of memory";
  // Without a stddev, the p05..p95 spread stands in: 2 ms wide at 10 ms is about 6% noise.
  ResultRow p_only_a = make_row("cpu-tiled", 10, 4096);
  p_only_a.ms_stddev.reset();
  p_only_a.ms_p05 = 9;
  p_only_a.ms_p95 = 11;
  ResultRow p_only_b = p_only_a;
  p_only_b.ms_median = 9.0;  // 11% faster, within 2·6%·√2 ≈ 17% noise

  const std::vector<ResultRow> a = {with_spread(make_row("cpu-flash", 10), 0.01),
                                    with_spread(make_row("cpu-vanilla", 10), 0.05),
                                    with_spread(make_row("cpu-flash", 10, 2048), 0.01),
                                    only_a,
                                    accuracy_a,
                                    make_row("cpu-sparge", 3),
                                    p_only_a};
  const std::vector<ResultRow> b = {
      with_spread(make_row("cpu-flash", 5), 0.01),       // 2× faster
      with_spread(make_row("cpu-vanilla", 10.5), 0.05),  // noise
      with_spread(make_row("cpu-flash", 13, 2048), 0.01), only_b, accuracy_b, failed_b, p_only_b};
  const report::Comparison result = report::compare_runs(a, b);
  ASSERT_EQ(result.cases.size(), 8u);
  EXPECT_EQ(result.cases[0].verdict, report::Verdict::Faster);
  EXPECT_DOUBLE_EQ(*result.cases[0].ratio, 2.0);
  EXPECT_EQ(result.cases[1].verdict, report::Verdict::Same);
  EXPECT_EQ(result.cases[2].verdict, report::Verdict::Slower);
  EXPECT_EQ(result.cases[3].verdict, report::Verdict::OnlyInA);
  EXPECT_EQ(result.cases[4].verdict, report::Verdict::Same);
  EXPECT_TRUE(result.cases[4].accuracy_worse);
  EXPECT_EQ(result.cases[5].verdict, report::Verdict::NotComparable);
  EXPECT_NE(result.cases[5].note.find("out of memory"), std::string::npos);
  EXPECT_EQ(result.cases[6].verdict, report::Verdict::Same);
  EXPECT_NEAR(*report::relative_spread(p_only_a), 2.0 / (2 * 1.645 * 10), 1e-12);
  EXPECT_EQ(result.cases[7].verdict, report::Verdict::OnlyInB);

  EXPECT_EQ(result.faster, 1);
  EXPECT_EQ(result.slower, 1);
  EXPECT_EQ(result.same, 3);
  EXPECT_EQ(result.not_comparable, 1);
  EXPECT_EQ(result.only_in_a, 1);
  EXPECT_EQ(result.only_in_b, 1);
  EXPECT_EQ(result.accuracy_worse, 1);
  EXPECT_NE(result.markdown.find("| cpu-flash B32 H16/16 N1024 d64 fp16 | 10.0 | 5.00 | 2.00× |"), std::string::npos)
      << result.markdown;
  EXPECT_NE(result.markdown.find("only in A"), std::string::npos);
  EXPECT_NE(result.terminal.find("accuracy worse"), std::string::npos) << result.terminal;
}

TEST(Compare, TinyChangesAreTheSameEvenWithoutNoise) {
  ResultRow a = make_row("cpu-flash", 10);
  a.ms_stddev = 0;
  ResultRow b = a;
  b.ms_median = 9.95;  // 0.5% faster: below the 1% floor
  EXPECT_EQ(report::compare_runs({a}, {b}).cases[0].verdict, report::Verdict::Same);
  b.ms_median = 9.8;  // 2% faster
  EXPECT_EQ(report::compare_runs({a}, {b}).cases[0].verdict, report::Verdict::Faster);
}

}  // namespace
}  // namespace attnsuite

namespace attnsuite {
namespace {

// The widest line of a terminal table, in display columns.
std::size_t widest_line(const std::string& text) {
  std::size_t widest = 0, start = 0;
  while (start < text.size()) {
    const std::size_t end = std::min(text.find('\n', start), text.size());
    widest = std::max(widest, report::display_width(std::string_view(text).substr(start, end - start)));
    start = end + 1;
  }
  return widest;
}

// terminal(fit_width) narrows the columns marked `shrinks`, widest first, wrapping their cells
// (`attnsuite list` was 480 columns wide); the others keep their width, and no column goes below
// its header or 12 columns.
TEST(Table, FitsTheTerminalByWrappingTheShrinkableColumns) {
  report::TextTable table({{"name"}, {"what", report::Align::Left, 0, true}, {"notes", report::Align::Left, 0, true}});
  table.add_row({"cpu-flash", std::string(150, 'w').insert(75, " "), "a short note"});
  table.add_row({"cpu-vanilla", "materialized scores", std::string(200, 'n').insert(50, " ").insert(120, " ")});
  const std::string natural = table.terminal();
  EXPECT_GT(widest_line(natural), 300u);
  for (const std::size_t width : {80u, 100u, 160u}) {
    const std::string fitted = table.terminal(width);
    EXPECT_LE(widest_line(fitted), width) << fitted;
    EXPECT_NE(fitted.find("cpu-vanilla"), std::string::npos);
    EXPECT_NE(fitted.find("materialized"), std::string::npos);
    EXPECT_GT(std::count(fitted.begin(), fitted.end(), '\n'), std::count(natural.begin(), natural.end(), '\n'))
        << "wrapped, not cut";
  }
  // Too narrow for the floors: as narrow as it goes, never below them.
  const std::string floor = table.terminal(20);
  EXPECT_EQ(widest_line(floor), 1 + (11 + 3) + (12 + 3) + (12 + 3)) << floor;
  EXPECT_EQ(table.terminal(1000), natural);
}

}  // namespace
}  // namespace attnsuite
