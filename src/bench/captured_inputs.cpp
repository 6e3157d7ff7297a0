#include "bench/captured_inputs.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "attnsuite/dtype.hpp"
#include "attnsuite/error.hpp"
#include "bench/generators.hpp"

namespace attnsuite::bench {
namespace {

[[noreturn]] void bad_file(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::Usage, fmt::format("input file '{}': {}", path, what));
}

std::vector<char> read_bytes(std::ifstream& in, const std::string& path, std::size_t count) {
  std::vector<char> bytes(count);
  if (count > 0 && !in.read(bytes.data(), static_cast<std::streamsize>(count)))
    bad_file(path, fmt::format("truncated: expected {} more bytes", count));
  return bytes;
}

enum class Stored { F32, F16, BF16, F64 };
std::size_t stored_size(Stored t) { return t == Stored::F64 ? 8 : t == Stored::F32 ? 4 : 2; }

void convert(const std::vector<char>& bytes, Stored type, std::vector<float>& out) {
  const std::size_t n = bytes.size() / stored_size(type);
  out.resize(n);
  switch (type) {
    case Stored::F32:
      std::memcpy(out.data(), bytes.data(), n * 4);
      break;
    case Stored::F16:
      convert_to_float(bytes.data(), DType::F16, out.data(), n);
      break;
    case Stored::BF16:
      convert_to_float(bytes.data(), DType::BF16, out.data(), n);
      break;
    case Stored::F64:
      for (std::size_t i = 0; i < n; ++i) {
        double x;
        std::memcpy(&x, bytes.data() + 8 * i, 8);
        out[i] = static_cast<float>(x);
      }
      break;
  }
}

std::int64_t element_count(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  return n;
}

// The value of 'key': ... in a numpy header dict (a Python literal).
std::string npy_field(const std::string& header, const std::string& key, const std::string& path) {
  const auto at = header.find("'" + key + "'");
  if (at == std::string::npos) bad_file(path, fmt::format("npy header has no '{}'", key));
  auto begin = header.find(':', at) + 1;
  while (begin < header.size() && header[begin] == ' ') ++begin;
  const char open = header[begin];
  const char close = open == '(' ? ')' : open == '\'' ? '\'' : ',';
  const auto end = header.find(close, begin + 1);
  if (end == std::string::npos) bad_file(path, "malformed npy header");
  return header.substr(open == '(' || open == '\'' ? begin + 1 : begin,
                       end - begin - (open == '(' || open == '\'' ? 1 : 0));
}

}  // namespace

LoadedTensor load_npy(const std::string& path, bool header_only) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad_file(path, "cannot be read");
  const std::vector<char> magic = read_bytes(in, path, 8);
  if (std::memcmp(magic.data(), "\x93NUMPY", 6) != 0) bad_file(path, "not a .npy file (no \\x93NUMPY magic)");
  const int major = static_cast<unsigned char>(magic[6]);
  std::size_t header_len = 0;
  if (major == 1) {
    const auto b = read_bytes(in, path, 2);
    header_len = static_cast<unsigned char>(b[0]) | (static_cast<std::size_t>(static_cast<unsigned char>(b[1])) << 8);
  } else if (major == 2 || major == 3) {
    const auto b = read_bytes(in, path, 4);
    for (int i = 3; i >= 0; --i)
      header_len = (header_len << 8) | static_cast<unsigned char>(b[static_cast<std::size_t>(i)]);
  } else {
    bad_file(path, fmt::format("npy format version {} not supported; allowed: 1, 2, 3", major));
  }
  if (header_len > (1u << 20)) bad_file(path, "npy header larger than 1 MiB");
  const auto header_bytes = read_bytes(in, path, header_len);
  const std::string header(header_bytes.begin(), header_bytes.end());
  const std::string descr = npy_field(header, "descr", path);
  Stored type;
  if (descr == "<f4" || descr == "=f4")
    type = Stored::F32;
  else if (descr == "<f2" || descr == "=f2")
    type = Stored::F16;
  else if (descr == "<f8" || descr == "=f8")
    type = Stored::F64;
  else
    bad_file(path,
             fmt::format("dtype '{}' not supported; allowed: <f4 (float32), <f2 (float16), <f8 (float64)", descr));
  if (npy_field(header, "fortran_order", path).find("True") != std::string::npos)
    bad_file(path, "Fortran-ordered arrays are not supported; save with np.ascontiguousarray");
  LoadedTensor t;
  const std::string dims = npy_field(header, "shape", path);
  std::size_t pos = 0;
  while (pos < dims.size()) {
    while (pos < dims.size() && (dims[pos] == ' ' || dims[pos] == ',')) ++pos;
    if (pos >= dims.size()) break;
    std::size_t used = 0;
    try {
      t.shape.push_back(std::stoll(dims.substr(pos), &used));
    } catch (const std::exception&) {
      bad_file(path, fmt::format("malformed npy shape '({})'", dims));
    }
    pos += used;
  }
  if (header_only) return t;
  convert(read_bytes(in, path, static_cast<std::size_t>(element_count(t.shape)) * stored_size(type)), type, t.values);
  return t;
}

LoadedTensor load_safetensors(const std::string& path, const std::string& tensor, bool header_only) {
  std::ifstream in(path, std::ios::binary);
  if (!in) bad_file(path, "cannot be read");
  const auto len_bytes = read_bytes(in, path, 8);
  std::uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i)
    header_len = (header_len << 8) | static_cast<unsigned char>(len_bytes[static_cast<std::size_t>(i)]);
  if (header_len > (std::uint64_t{100} << 20)) bad_file(path, "not a .safetensors file (header length over 100 MiB)");
  const auto header_bytes = read_bytes(in, path, static_cast<std::size_t>(header_len));
  const nlohmann::json header = nlohmann::json::parse(header_bytes.begin(), header_bytes.end(), nullptr, false);
  if (header.is_discarded() || !header.is_object())
    bad_file(path, "not a .safetensors file (header is not a JSON object)");
  if (!header.contains(tensor)) {
    std::vector<std::string> names;
    for (const auto& [key, value] : header.items())
      if (key != "__metadata__") names.push_back(key);
    bad_file(path, fmt::format("no tensor '{}'; it has: {}", tensor, fmt::join(names, ", ")));
  }
  const auto& entry = header[tensor];
  if (!entry.is_object() || !entry.contains("dtype") || !entry["dtype"].is_string() || !entry.contains("shape") ||
      !entry["shape"].is_array() || !entry.contains("data_offsets") || !entry["data_offsets"].is_array() ||
      entry["data_offsets"].size() != 2)
    bad_file(path, fmt::format("tensor '{}': malformed header entry", tensor));
  const std::string dtype = entry["dtype"].get<std::string>();
  Stored type;
  if (dtype == "F32")
    type = Stored::F32;
  else if (dtype == "F16")
    type = Stored::F16;
  else if (dtype == "BF16")
    type = Stored::BF16;
  else if (dtype == "F64")
    type = Stored::F64;
  else
    bad_file(path, fmt::format("tensor '{}': dtype {} not supported; allowed: F32, F16, BF16, F64", tensor, dtype));
  LoadedTensor t;
  for (const auto& s : entry["shape"]) {
    if (!s.is_number_integer() || s.get<std::int64_t>() < 0)
      bad_file(path, fmt::format("tensor '{}': malformed shape", tensor));
    t.shape.push_back(s.get<std::int64_t>());
  }
  const auto begin = entry["data_offsets"][0].get<std::uint64_t>(), end = entry["data_offsets"][1].get<std::uint64_t>();
  if (end < begin || end - begin != static_cast<std::uint64_t>(element_count(t.shape)) * stored_size(type))
    bad_file(path,
             fmt::format("tensor '{}': data_offsets [{}, {}) do not match its shape and dtype", tensor, begin, end));
  if (header_only) return t;
  in.seekg(static_cast<std::streamoff>(8 + header_len + begin));
  convert(read_bytes(in, path, static_cast<std::size_t>(end - begin)), type, t.values);
  return t;
}

namespace {

// (batch, seq, heads, dim) or (seq, heads, dim) for batch 1, against what the problem needs.
void check_shape(const std::string& what, const std::vector<std::int64_t>& shape, std::int64_t batch, std::int64_t seq,
                 std::int64_t heads, std::int64_t dim) {
  const std::vector<std::int64_t> want{batch, seq, heads, dim};
  const bool ok = shape == want || (batch == 1 && shape == std::vector<std::int64_t>{seq, heads, dim});
  if (!ok)
    throw Error(ErrorKind::Usage,
                fmt::format("{}: shape ({}) does not match the problem's (batch, seq, heads, dim) = ({}); "
                            "pass matching --batch/--seq/--heads/--kv-heads/--head-dim",
                            what, fmt::join(shape, ", "), fmt::join(want, ", ")));
}

LoadedTensor load_captured(const std::string& kind, const std::string& path, const char* name, bool header_only) {
  return kind == "npy" ? load_npy(path + "/" + name + ".npy", header_only) : load_safetensors(path, name, header_only);
}

}  // namespace

const GeneratorInfo& captured_generator(std::string_view name) {
  static std::mutex mutex;
  static std::deque<GeneratorInfo> loaded;
  const std::lock_guard lock(mutex);
  for (const auto& g : loaded)
    if (g.name == name) return g;
  const auto colon = name.find(':');
  const std::string kind(name.substr(0, colon)), path(name.substr(colon + 1));
  if (path.empty())
    throw Error(ErrorKind::Usage, fmt::format("input generator '{}' needs a path: {}:PATH", name, kind));
  for (const char* tensor : {"q", "k", "v"}) {
    const LoadedTensor t = load_captured(kind, path, tensor, true);  // early, clear errors
    if (t.shape.size() != 3 && t.shape.size() != 4)
      throw Error(ErrorKind::Usage, fmt::format("input file '{}' tensor {}: {} dims; needs (batch, seq, heads, dim) or "
                                                "(seq, heads, dim)",
                                                path, tensor, t.shape.size()));
  }
  GeneratorInfo info;
  info.name = std::string(name);
  info.description =
      kind == "npy" ? "captured Q/K/V from DIR/q.npy, k.npy, v.npy" : "captured Q/K/V from a .safetensors file";
  info.fill = [kind, path](const AttentionProblem& p, std::uint64_t, std::span<float> q, std::span<float> k,
                           std::span<float> v) {
    const struct {
      const char* name;
      std::span<float> out;
      int seq, heads, dim;
    } tensors[] = {{"q", q, p.seq_q, p.heads_q, p.head_dim},
                   {"k", k, p.seq_kv, p.heads_kv, p.head_dim},
                   {"v", v, p.seq_kv, p.heads_kv, p.dim_v()}};
    for (const auto& t : tensors) {
      LoadedTensor data = load_captured(kind, path, t.name, false);
      check_shape(fmt::format("input file '{}' tensor {}", path, t.name), data.shape, p.batch, t.seq, t.heads, t.dim);
      std::copy(data.values.begin(), data.values.end(), t.out.begin());
    }
  };
  loaded.push_back(std::move(info));
  return loaded.back();
}

}  // namespace attnsuite::bench
