// libFuzzer target: the problem validator (AttentionProblem::validate) and what rests on it.
// Input: the fields as little-endian 32-bit words — batch, heads_q, heads_kv, seq_q, seq_kv,
// head_dim, head_dim_v, window_left, window_right, flags (bits 0-1 dtype, bit 2 layout, bit 3
// causal), scale (float bits) — missing bytes are zero (tests/fuzz/make_seeds.py writes the
// seeds). Every problem either validates or throws one Error(Usage) of one line. A valid one
// keeps the invariants the backends rely on: key ranges inside [0, seq_kv) and nondecreasing in
// the query row (cpu-flash's tile bounds), a finite positive scale, finite FLOP and byte
// counts. Small valid problems also run through the CPU backends: cpu-flash against the fp64
// reference on finite inputs, LSE -inf exactly for the rows that see no key.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "attnsuite/attnsuite.hpp"
#include "fuzz_support.hpp"

using namespace attnsuite;

namespace {

constexpr std::size_t kFields = 11;

AttentionProblem decode(const std::uint8_t* data, std::size_t size) {
  std::uint32_t words[kFields] = {};
  std::memcpy(words, data, std::min(size, sizeof words));
  auto as_int = [&](int i) {
    std::int32_t value;
    std::memcpy(&value, &words[i], sizeof value);
    return value;
  };
  AttentionProblem p;
  p.batch = as_int(0);
  p.heads_q = as_int(1);
  p.heads_kv = as_int(2);
  p.seq_q = as_int(3);
  p.seq_kv = as_int(4);
  p.head_dim = as_int(5);
  p.head_dim_v = as_int(6);
  p.window_left = as_int(7);
  p.window_right = as_int(8);
  const std::uint32_t flags = words[9];
  p.dtype = (flags & 3u) == 1 ? DType::F16 : (flags & 3u) == 2 ? DType::BF16 : DType::F32;
  p.layout = (flags & 4u) != 0 ? Layout::BHSD : Layout::BSHD;
  p.causal = (flags & 8u) != 0;
  std::memcpy(&p.scale, &words[10], sizeof p.scale);
  return p;
}

void check_invariants(const AttentionProblem& p) {
  if (p.group_size() < 1 || p.kv_head_of(p.heads_q - 1) >= p.heads_kv) fuzzing::finding("GQA grouping", p.describe());
  if (!(std::isfinite(p.softmax_scale()) && p.softmax_scale() > 0)) fuzzing::finding("softmax scale", p.describe());
  const std::int64_t rows[] = {0, 1, p.seq_q / 2, p.seq_q - 2, p.seq_q - 1};
  for (const std::int64_t i : rows) {
    if (i < 0 || i >= p.seq_q) continue;
    const std::int64_t begin = p.key_begin(i), end = p.key_end(i);
    if (begin < 0 || end < 0 || end > p.seq_kv) fuzzing::finding("key range outside [0, seq_kv]", p.describe());
    if (i + 1 < p.seq_q && (p.key_begin(i + 1) < begin || p.key_end(i + 1) < end))
      fuzzing::finding("key range not nondecreasing in the query row", p.describe());
  }
  if (!(std::isfinite(p.min_bytes()) && p.min_bytes() > 0)) fuzzing::finding("min_bytes", p.describe());
  // flops() walks every query row of a masked problem: only for the short ones.
  if (p.seq_q <= (1 << 16) && !(std::isfinite(p.flops()) && p.flops() >= 0)) fuzzing::finding("flops", p.describe());
  if (p.describe().empty()) fuzzing::finding("describe", "");
}

struct Tensor {
  std::vector<unsigned char> bytes;
  TensorView view;
};

Tensor make_tensor(const AttentionProblem& p, std::array<std::int64_t, 4> shape, std::mt19937& rng) {
  Tensor t;
  t.view.dtype = p.dtype;
  t.view.shape = shape;
  t.view.strides = TensorView::dense_strides(shape, p.layout);
  t.bytes.resize(static_cast<std::size_t>(shape[0] * shape[1] * shape[2] * shape[3]) * size_of(p.dtype));
  t.view.data = t.bytes.data();
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (std::int64_t i = 0; i < t.view.numel(); ++i) store_from_float(t.bytes.data(), p.dtype, i, normal(rng));
  return t;
}

// cpu-flash and the reference on a small problem with finite inputs: outputs finite and close,
// LSE -inf exactly for the rows that see no key.
void run_small(const AttentionProblem& p) {
  Backend& flash = Registry::global().find("cpu-flash");
  Backend& reference = Registry::global().find("reference");
  if (!flash.supports(p) || !reference.supports(p)) return;
  std::mt19937 rng(12345);
  const Tensor q = make_tensor(p, {p.batch, p.seq_q, p.heads_q, p.head_dim}, rng);
  const Tensor k = make_tensor(p, {p.batch, p.seq_kv, p.heads_kv, p.head_dim}, rng);
  const Tensor v = make_tensor(p, {p.batch, p.seq_kv, p.heads_kv, p.dim_v()}, rng);
  std::vector<float> outputs[2], lses[2];
  Backend* backends[2] = {&flash, &reference};
  for (int n = 0; n < 2; ++n) {
    Tensor o = make_tensor(p, {p.batch, p.seq_q, p.heads_q, p.dim_v()}, rng);
    std::vector<float> lse(static_cast<std::size_t>(p.batch) * p.heads_q * p.seq_q);
    AttentionArgs args;
    args.q = q.view;
    args.k = k.view;
    args.v = v.view;
    args.o = o.view;
    args.lse.data = lse.data();
    backends[n]->forward(p, args, nullptr);
    for (std::int64_t b = 0; b < p.batch; ++b)
      for (std::int64_t s = 0; s < p.seq_q; ++s)
        for (std::int64_t h = 0; h < p.heads_q; ++h)
          for (std::int64_t d = 0; d < p.dim_v(); ++d)
            outputs[n].push_back(load_as_float(o.view.data, p.dtype, o.view.offset(b, s, h, d)));
    lses[n] = std::move(lse);
  }
  // Scores are at most |scale|·Σ|q·k|; with a huge scale exp() saturates, so compare only
  // outputs, which stay within the range of V.
  const double tolerance = p.dtype == DType::F32 ? 1e-3 : 5e-2;
  for (std::size_t i = 0; i < outputs[0].size(); ++i) {
    if (!std::isfinite(outputs[0][i])) fuzzing::finding("cpu-flash output not finite", p.describe());
    if (std::abs(outputs[0][i] - outputs[1][i]) > tolerance * (1.0 + std::abs(outputs[1][i])))
      fuzzing::finding("cpu-flash differs from the reference", p.describe());
  }
  for (std::int64_t row = 0; row < static_cast<std::int64_t>(lses[0].size()); ++row) {
    const std::int64_t i = row % p.seq_q;
    const bool empty = p.key_begin(i) >= p.key_end(i);
    for (int n = 0; n < 2; ++n)
      if (empty != (lses[n][row] == -INFINITY)) fuzzing::finding("LSE of a fully masked row", p.describe());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const AttentionProblem p = decode(data, size);
  try {
    p.validate();
  } catch (const Error& error) {
    fuzzing::expect_usage_error(error);
    return 0;
  }
  check_invariants(p);
  // Small problems only (at most 32 query rows of 32 keys or dims: the forward is then cheaper
  // than starting its threads), and scales for which fp32 scores cannot overflow: with scale
  // 1e38 every backend in fp32, PyTorch's too, turns finite inputs into Inf scores and NaN
  // outputs, while the fp64 reference does not.
  const double elements = static_cast<double>(p.batch) * p.heads_q * p.seq_q * std::max(p.seq_kv, p.dim_v());
  if (elements <= 1024 && p.head_dim <= 256 && p.scale <= 100.0f) run_small(p);
  return 0;
}
