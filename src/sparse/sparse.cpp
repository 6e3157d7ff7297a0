#include "sparse/sparse.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <numeric>
#include <sstream>

#include "attnsuite/error.hpp"
#include "core/generator_math.hpp"
#include "core/parallel.hpp"

namespace attnsuite::sparse {

BlockShape block_shape_for(int head_dim) {
  switch (head_dim) {
    case 64:
      return {128, 64, 32};
    case 128:
      return {128, 32, 32};
    case 256:
      return {64, 32, 16};
    default:
      throw Error(
          ErrorKind::Unsupported,
          fmt::format("head dim {} not supported by the block-sparse kernels; allowed: 64, 128, 256", head_dim));
  }
}

const HeadSettings& SparseConfig::for_head(int q_head) const {
  ATTNSUITE_CHECK(!heads.empty(), ErrorKind::Internal, "sparse config without head settings");
  return heads.size() == 1 ? heads[0] : heads.at(static_cast<std::size_t>(q_head));
}

namespace {

void check_unit(double value, const char* name, int head, bool allow_zero) {
  if (!(value >= 0.0 && value <= 1.0) || (!allow_zero && value == 0.0))
    throw Error(ErrorKind::Usage, fmt::format("sparse config head {}: {} {} out of range; allowed: {}", head, name,
                                              value, allow_zero ? "0 to 1" : "greater than 0, at most 1"));
}

}  // namespace

void SparseConfig::validate(int heads_q) const {
  if (heads.empty()) throw Error(ErrorKind::Usage, "sparse config has no head settings");
  if (heads_q > 0 && heads.size() != 1 && static_cast<int>(heads.size()) != heads_q)
    throw Error(ErrorKind::Usage, fmt::format("sparse config has settings for {} heads; the problem has {} q heads "
                                              "(allowed: 1 setting for all, or one per q head)",
                                              heads.size(), heads_q));
  for (std::size_t i = 0; i < heads.size(); ++i) {
    const HeadSettings& s = heads[i];
    const int h = static_cast<int>(i);
    if (!(s.sim_threshold >= -1.0 && s.sim_threshold <= 1.0))
      throw Error(
          ErrorKind::Usage,
          fmt::format("sparse config head {}: sim_threshold {} out of range; allowed: -1 to 1", h, s.sim_threshold));
    check_unit(s.cdf_threshold, "cdf_threshold", h, false);
    check_unit(s.topk, "topk", h, true);
    if (!(s.pv_threshold > 0.0))
      throw Error(ErrorKind::Usage, fmt::format("sparse config head {}: pv_threshold {} out of range; allowed: greater "
                                                "than 0 (null or inf: never skip P·V)",
                                                h, s.pv_threshold));
  }
}

nlohmann::json to_json(const HeadSettings& s) {
  nlohmann::json j;
  j["sim_threshold"] = s.sim_threshold;
  j["cdf_threshold"] = s.cdf_threshold;
  j["topk"] = s.topk;
  j["pv_threshold"] = std::isfinite(s.pv_threshold) ? nlohmann::json(s.pv_threshold) : nlohmann::json();
  j["dense"] = s.dense;
  return j;
}

HeadSettings head_settings_from_json(const nlohmann::json& value, const std::string& where) {
  if (!value.is_object()) throw Error(ErrorKind::Usage, fmt::format("{}: a head's settings must be an object", where));
  HeadSettings s;
  auto number = [&](const char* key, double& out) {
    if (!value.contains(key) || value[key].is_null()) return;
    if (!value[key].is_number()) throw Error(ErrorKind::Usage, fmt::format("{}: '{}' must be a number", where, key));
    out = value[key].get<double>();
  };
  number("sim_threshold", s.sim_threshold);
  number("cdf_threshold", s.cdf_threshold);
  number("topk", s.topk);
  number("pv_threshold", s.pv_threshold);
  if (value.contains("dense")) {
    if (!value["dense"].is_boolean())
      throw Error(ErrorKind::Usage, fmt::format("{}: 'dense' must be true or false", where));
    s.dense = value["dense"].get<bool>();
  }
  return s;
}

SparseConfig config_from_json(const nlohmann::json& document, const std::string& source, int layer) {
  if (!document.is_object() || !document.contains("layers") || !document["layers"].is_array() ||
      document["layers"].empty())
    throw Error(ErrorKind::Usage, fmt::format("{}: not a sparse config (needs a non-empty \"layers\" array)", source));
  const auto& layers = document["layers"];
  if (layer < 0 || static_cast<std::size_t>(layer) >= layers.size())
    throw Error(ErrorKind::Usage,
                fmt::format("{}: layer {} out of range; the file has {} layers", source, layer, layers.size()));
  const auto& entry = layers[static_cast<std::size_t>(layer)];
  if (!entry.is_object() || !entry.contains("heads") || !entry["heads"].is_array() || entry["heads"].empty())
    throw Error(ErrorKind::Usage, fmt::format("{}: layer {} needs a non-empty \"heads\" array", source, layer));
  SparseConfig config;
  if (document.contains("sink")) {
    if (!document["sink"].is_boolean())
      throw Error(ErrorKind::Usage, fmt::format("{}: 'sink' must be true or false", source));
    config.sink = document["sink"].get<bool>();
  }
  config.heads.clear();
  for (std::size_t h = 0; h < entry["heads"].size(); ++h)
    config.heads.push_back(
        head_settings_from_json(entry["heads"][h], fmt::format("{}: layer {} head {}", source, layer, h)));
  try {
    config.validate(0);
  } catch (const Error& error) {
    throw Error(ErrorKind::Usage, fmt::format("{}: {}", source, error.what()));
  }
  return config;
}

SparseConfig load_config(const std::string& path, int layer) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::Usage, fmt::format("cannot read sparse config '{}'", path));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json document = nlohmann::json::parse(text.str(), nullptr, false);
  if (document.is_discarded()) throw Error(ErrorKind::Usage, fmt::format("sparse config '{}' is not valid JSON", path));
  return config_from_json(document, path, layer);
}

std::int64_t BlockMask::kept_blocks() const { return std::accumulate(count.begin(), count.end(), std::int64_t{0}); }

std::pair<int, int> visible_blocks(const AttentionProblem& p, BlockShape shape, int m_block) {
  const std::int64_t first = static_cast<std::int64_t>(m_block) * shape.m;
  const std::int64_t last = std::min<std::int64_t>(first + shape.m, p.seq_q) - 1;
  const std::int64_t begin = p.key_begin(first), end = p.key_end(last);
  if (end <= begin) return {0, 0};
  return {static_cast<int>(begin / shape.n), static_cast<int>((end + shape.n - 1) / shape.n)};
}

std::int64_t visible_block_count(const AttentionProblem& p, BlockShape shape) {
  const int m_blocks = (p.seq_q + shape.m - 1) / shape.m;
  std::int64_t total = 0;
  for (int mb = 0; mb < m_blocks; ++mb) {
    const auto [lo, hi] = visible_blocks(p, shape, mb);
    total += hi - lo;
  }
  return total * p.batch * p.heads_q;
}

bool block_is_partial(const AttentionProblem& p, BlockShape shape, int m_block, int n_block) {
  const std::int64_t first = static_cast<std::int64_t>(m_block) * shape.m;
  const std::int64_t last = std::min<std::int64_t>(first + shape.m, p.seq_q) - 1;
  // Keys every row of the q block sees: [last row's begin, first row's end).
  const std::int64_t unmasked_begin = p.key_begin(last), unmasked_end = std::min(p.key_end(first), p.key_end(last));
  const std::int64_t key_begin = static_cast<std::int64_t>(n_block) * shape.n;
  const std::int64_t key_end = std::min<std::int64_t>(key_begin + shape.n, p.seq_kv);
  return key_begin < unmasked_begin || key_end > unmasked_end;
}

PooledBlocks pool_blocks(const TensorView& x, int block_rows) {
  PooledBlocks out;
  const int batch = static_cast<int>(x.shape[0]), seq = static_cast<int>(x.shape[1]);
  out.heads = static_cast<int>(x.shape[2]);
  out.dim = static_cast<int>(x.shape[3]);
  out.blocks = (seq + block_rows - 1) / block_rows;
  const std::size_t items = static_cast<std::size_t>(batch) * out.heads * out.blocks;
  out.mean.assign(items * out.dim, 0.0f);
  out.sim.assign(items, 0.0f);
  cpu::parallel_for(static_cast<std::int64_t>(items), cpu::cpu_threads(), [&](std::int64_t item, int) {
    const int block = static_cast<int>(item % out.blocks);
    const int h = static_cast<int>((item / out.blocks) % out.heads);
    const int b = static_cast<int>(item / (static_cast<std::int64_t>(out.blocks) * out.heads));
    const int begin = block * block_rows, end = std::min(seq, begin + block_rows);
    std::vector<double> sum(static_cast<std::size_t>(out.dim), 0.0), unit(static_cast<std::size_t>(out.dim), 0.0);
    std::vector<float> row(static_cast<std::size_t>(out.dim));
    for (int s = begin; s < end; ++s) {
      double norm2 = 0;
      for (int d = 0; d < out.dim; ++d) {
        row[static_cast<std::size_t>(d)] = load_as_float(x.data, x.dtype, x.offset(b, s, h, d));
        norm2 += static_cast<double>(row[static_cast<std::size_t>(d)]) * row[static_cast<std::size_t>(d)];
      }
      const double inverse = norm2 > 0 ? 1.0 / std::sqrt(norm2) : 0.0;
      for (int d = 0; d < out.dim; ++d) {
        sum[static_cast<std::size_t>(d)] += row[static_cast<std::size_t>(d)];
        unit[static_cast<std::size_t>(d)] += row[static_cast<std::size_t>(d)] * inverse;
      }
    }
    const int rows = end - begin;
    double sim = 0;
    for (int d = 0; d < out.dim; ++d) {
      out.mean[static_cast<std::size_t>(item) * out.dim + d] =
          static_cast<float>(sum[static_cast<std::size_t>(d)] / rows);
      const double u = unit[static_cast<std::size_t>(d)] / rows;
      sim += u * u;
    }
    out.sim[static_cast<std::size_t>(item)] = static_cast<float>(sim);
  });
  return out;
}

namespace {
// A mask of `p`'s shape in `shape` blocks with no block listed yet.
BlockMask empty_mask(const AttentionProblem& p, BlockShape shape) {
  BlockMask mask;
  mask.batch = p.batch;
  mask.heads = p.heads_q;
  mask.m_blocks = (p.seq_q + shape.m - 1) / shape.m;
  mask.n_blocks = (p.seq_kv + shape.n - 1) / shape.n;
  const std::size_t slots = static_cast<std::size_t>(p.batch) * p.heads_q * mask.m_blocks;
  mask.count.assign(slots, 0);
  mask.index.assign(slots * static_cast<std::size_t>(mask.n_blocks), 0);
  return mask;
}
}  // namespace

BlockMask select_blocks(const AttentionProblem& p, BlockShape shape, const SparseConfig& config, const PooledBlocks& q,
                        const PooledBlocks& k) {
  BlockMask mask = empty_mask(p, shape);
  const std::size_t slots = mask.count.size();
  const double scale = p.softmax_scale();
  const int dim = p.head_dim;
  cpu::parallel_for(static_cast<std::int64_t>(slots), cpu::cpu_threads(), [&](std::int64_t item, int) {
    const int mb = static_cast<int>(item % mask.m_blocks);
    const int h = static_cast<int>((item / mask.m_blocks) % p.heads_q);
    const int b = static_cast<int>(item / (static_cast<std::int64_t>(mask.m_blocks) * p.heads_q));
    const int kvh = p.kv_head_of(h);
    const HeadSettings& s = config.for_head(h);
    const auto [lo, hi] = visible_blocks(p, shape, mb);
    std::int32_t* out = mask.index.data() + static_cast<std::size_t>(item) * mask.n_blocks;
    int count = 0;
    if (hi <= lo) {
      mask.count[static_cast<std::size_t>(item)] = 0;
      return;
    }
    const std::size_t q_item = (static_cast<std::size_t>(b) * q.heads + h) * q.blocks + mb;
    const bool keep_all = s.dense || q.sim[q_item] < s.sim_threshold || (s.topk <= 0 && s.cdf_threshold >= 1.0);
    std::vector<char> keep(static_cast<std::size_t>(hi - lo), keep_all ? 1 : 0);
    if (!keep_all) {
      const float* qbar = q.mean.data() + q_item * dim;
      std::vector<double> prob(static_cast<std::size_t>(hi - lo));
      double max_score = -INFINITY;
      for (int j = lo; j < hi; ++j) {
        const float* kbar = k.mean.data() + ((static_cast<std::size_t>(b) * k.heads + kvh) * k.blocks + j) * dim;
        double dot = 0;
        for (int d = 0; d < dim; ++d) dot += static_cast<double>(qbar[d]) * kbar[d];
        prob[static_cast<std::size_t>(j - lo)] = dot * scale;
        max_score = std::max(max_score, dot * scale);
      }
      double total = 0;
      for (double& v : prob) total += (v = std::exp(v - max_score));
      for (double& v : prob) v /= total;
      std::vector<int> order(prob.size());
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int a, int c) {
        return prob[static_cast<std::size_t>(a)] > prob[static_cast<std::size_t>(c)];
      });
      const int visible = hi - lo;
      if (s.topk > 0) {
        const int take = std::clamp(static_cast<int>(std::ceil(s.topk * visible)), 1, visible);
        for (int i = 0; i < take; ++i) keep[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] = 1;
      } else {
        double before = 0;
        for (int i = 0; i < visible && before < s.cdf_threshold; ++i) {
          keep[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])] = 1;
          before += prob[static_cast<std::size_t>(order[static_cast<std::size_t>(i)])];
        }
      }
      for (int j = lo; j < hi; ++j) {
        const std::size_t k_item = (static_cast<std::size_t>(b) * k.heads + kvh) * k.blocks + j;
        if (k.sim[k_item] < s.sim_threshold || (config.sink && j == 0) || block_is_partial(p, shape, mb, j))
          keep[static_cast<std::size_t>(j - lo)] = 1;
      }
    }
    for (int j = lo; j < hi; ++j)
      if (keep[static_cast<std::size_t>(j - lo)]) out[count++] = j;
    mask.count[static_cast<std::size_t>(item)] = count;
  });
  return mask;
}

BlockMask predict_blocks(const AttentionProblem& p, const AttentionArgs& args, BlockShape shape,
                         const SparseConfig& config) {
  config.validate(p.heads_q);
  const PooledBlocks q = pool_blocks(args.q, shape.m);
  const PooledBlocks k = pool_blocks(args.k, shape.n);
  return select_blocks(p, shape, config, q, k);
}

BlockMask dense_mask(const AttentionProblem& p, BlockShape shape) {
  BlockMask mask = empty_mask(p, shape);
  const std::size_t slots = mask.count.size();
  for (std::size_t slot = 0; slot < slots; ++slot) {
    const auto [lo, hi] = visible_blocks(p, shape, static_cast<int>(slot % static_cast<std::size_t>(mask.m_blocks)));
    for (int j = lo; j < hi; ++j)
      mask.index[slot * static_cast<std::size_t>(mask.n_blocks) + static_cast<std::size_t>(mask.count[slot]++)] = j;
  }
  return mask;
}

BlockMask coarsen_mask(const BlockMask& mask, int factor) {
  if (factor < 1) throw Error(ErrorKind::Internal, fmt::format("coarsen_mask: factor {} < 1", factor));
  BlockMask tiles;
  tiles.batch = mask.batch;
  tiles.heads = mask.heads;
  tiles.m_blocks = mask.m_blocks;
  tiles.n_blocks = (mask.n_blocks + factor - 1) / factor;
  tiles.count.assign(mask.count.size(), 0);
  tiles.index.assign(mask.count.size() * static_cast<std::size_t>(tiles.n_blocks), 0);
  for (std::size_t slot = 0; slot < mask.count.size(); ++slot) {
    const std::int32_t* in = mask.index.data() + slot * static_cast<std::size_t>(mask.n_blocks);
    std::int32_t* out = tiles.index.data() + slot * static_cast<std::size_t>(tiles.n_blocks);
    for (int c = 0; c < mask.count[slot]; ++c) {
      const std::int32_t tile = in[c] / factor;  // ascending input: equal tiles are adjacent
      if (tiles.count[slot] == 0 || out[tiles.count[slot] - 1] != tile) out[tiles.count[slot]++] = tile;
    }
  }
  return tiles;
}

void normalize_mask(BlockMask& mask, const AttentionProblem& p, BlockShape shape) {
  for (std::size_t slot = 0; slot < mask.count.size(); ++slot) {
    const auto [lo, hi] = visible_blocks(p, shape, static_cast<int>(slot % static_cast<std::size_t>(mask.m_blocks)));
    auto* begin = mask.index.data() + slot * static_cast<std::size_t>(mask.n_blocks);
    auto* end = begin + mask.count[slot];
    std::sort(begin, end);
    end = std::unique(begin, end);
    end = std::remove_if(begin, end, [lo = lo, hi = hi](std::int32_t j) { return j < lo || j >= hi; });
    mask.count[slot] = static_cast<std::int32_t>(end - begin);
  }
}

namespace {

BlockMask mask_from_file(const std::string& path, const AttentionProblem& p, BlockShape shape) {
  std::ifstream in(path);
  if (!in) throw Error(ErrorKind::Usage, fmt::format("cannot read block mask file '{}'", path));
  std::stringstream text;
  text << in.rdbuf();
  const nlohmann::json doc = nlohmann::json::parse(text.str(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object())
    throw Error(ErrorKind::Usage, fmt::format("block mask file '{}' is not a JSON object", path));
  auto integer = [&](const char* key) {
    if (!doc.contains(key) || !doc[key].is_number_integer())
      throw Error(ErrorKind::Usage, fmt::format("block mask file '{}': '{}' must be an integer", path, key));
    return doc[key].get<int>();
  };
  if (integer("block_m") != shape.m || integer("block_n") != shape.n)
    throw Error(ErrorKind::Usage, fmt::format("block mask file '{}' has blocks of {}×{}; head dim {} needs {}×{}", path,
                                              integer("block_m"), integer("block_n"), p.head_dim, shape.m, shape.n));
  if (!doc.contains("masks") || !doc["masks"].is_array() ||
      (doc["masks"].size() != 1 && static_cast<int>(doc["masks"].size()) != p.heads_q))
    throw Error(ErrorKind::Usage,
                fmt::format("block mask file '{}': 'masks' must hold 1 or {} (q heads) lists", path, p.heads_q));
  BlockMask mask = dense_mask(p, shape);
  for (int b = 0; b < p.batch; ++b)
    for (int h = 0; h < p.heads_q; ++h) {
      const auto& head = doc["masks"][doc["masks"].size() == 1 ? 0 : static_cast<std::size_t>(h)];
      if (!head.is_array() || static_cast<int>(head.size()) != mask.m_blocks)
        throw Error(ErrorKind::Usage,
                    fmt::format("block mask file '{}': head {} needs {} q-block lists (seq_q {} / {})", path, h,
                                mask.m_blocks, p.seq_q, shape.m));
      for (int mb = 0; mb < mask.m_blocks; ++mb) {
        const std::size_t slot = mask.slot(b, h, mb);
        const auto& list = head[static_cast<std::size_t>(mb)];
        if (!list.is_array())
          throw Error(ErrorKind::Usage,
                      fmt::format("block mask file '{}': head {} q block {} is not a list", path, h, mb));
        int count = 0;
        for (const auto& j : list) {
          if (!j.is_number_integer() || j.get<int>() < 0 || j.get<int>() >= mask.n_blocks)
            throw Error(ErrorKind::Usage,
                        fmt::format("block mask file '{}': head {} q block {}: key block {} out of range "
                                    "0..{}",
                                    path, h, mb, j.dump(), mask.n_blocks - 1));
          if (count < mask.n_blocks)
            mask.index[slot * static_cast<std::size_t>(mask.n_blocks) + static_cast<std::size_t>(count++)] =
                j.get<int>();
        }
        mask.count[slot] = count;
      }
    }
  normalize_mask(mask, p, shape);
  return mask;
}

}  // namespace

BlockMask make_block_mask(const std::string& spec, const AttentionProblem& p, BlockShape shape, std::uint64_t seed) {
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  const std::string arg = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "file" && !arg.empty()) return mask_from_file(arg, p, shape);
  if (spec == "dense") return dense_mask(p, shape);
  double value = 0;
  std::size_t used = 0;
  try {
    value = std::stod(arg, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const bool number = !arg.empty() && used == arg.size() && std::isfinite(value);
  BlockMask mask = dense_mask(p, shape);
  if (kind == "band" && number && value >= 1 && value == std::floor(value)) {
    const int width = static_cast<int>(value);
    for (std::size_t slot = 0; slot < mask.count.size(); ++slot) {
      const int mb = static_cast<int>(slot % static_cast<std::size_t>(mask.m_blocks));
      const auto [lo, hi] = visible_blocks(p, shape, mb);
      // The key blocks of the q block's diagonal (bottom-right aligned, as the causal mask).
      const std::int64_t first = static_cast<std::int64_t>(mb) * shape.m;
      const std::int64_t last = std::min<std::int64_t>(first + shape.m, p.seq_q) - 1;
      const std::int64_t diag_first = (first + p.seq_kv - p.seq_q) / shape.n;
      const std::int64_t diag_last = (last + p.seq_kv - p.seq_q) / shape.n;
      std::int32_t* list = mask.index.data() + slot * static_cast<std::size_t>(mask.n_blocks);
      int count = 0;
      for (int j = lo; j < hi; ++j)
        if (j == 0 || (j > diag_first - width && j < diag_last + width)) list[count++] = j;
      mask.count[slot] = count;
    }
    return mask;
  }
  if (kind == "random" && number && value >= 0 && value <= 1) {
    for (std::size_t slot = 0; slot < mask.count.size(); ++slot) {
      const int mb = static_cast<int>(slot % static_cast<std::size_t>(mask.m_blocks));
      const auto [lo, hi] = visible_blocks(p, shape, mb);
      std::int32_t* list = mask.index.data() + slot * static_cast<std::size_t>(mask.n_blocks);
      int count = 0;
      for (int j = lo; j < hi; ++j) {
        const std::uint64_t bits =
            bench::genmath::mix(seed ^ bench::genmath::mix(slot * 1000003u + static_cast<std::uint64_t>(j)));
        if (bench::genmath::unit_open(bits) <= value || block_is_partial(p, shape, mb, j) || j == hi - 1)
          list[count++] = j;
      }
      mask.count[slot] = count;
    }
    return mask;
  }
  throw Error(ErrorKind::Usage, fmt::format("bad block mask '{}'; allowed: band:W (W >= 1 key blocks), random:P "
                                            "(0 <= P <= 1), file:PATH, dense",
                                            spec));
}

double SparseStats::predicted_sparsity() const {
  return visible_blocks > 0 ? 1.0 - static_cast<double>(computed_blocks) / static_cast<double>(visible_blocks) : 0.0;
}

double SparseStats::achieved_sparsity() const {
  if (visible_blocks <= 0 || pv_groups <= 0) return predicted_sparsity();
  const double pv_done = 1.0 - static_cast<double>(pv_skipped_groups) / static_cast<double>(pv_groups);
  const double work = static_cast<double>(computed_blocks) * (1.0 + pv_done);
  return 1.0 - work / (2.0 * static_cast<double>(visible_blocks));
}

void sparse_forward(const AttentionProblem& p, const AttentionArgs& args, BlockShape shape, const BlockMask& mask,
                    const SparseConfig& config, SparseStats* stats) {
  config.validate(p.heads_q);
  ATTNSUITE_CHECK(mask.batch == p.batch && mask.heads == p.heads_q &&
                      mask.m_blocks == (p.seq_q + shape.m - 1) / shape.m &&
                      mask.n_blocks == (p.seq_kv + shape.n - 1) / shape.n,
                  ErrorKind::Internal, "block mask does not match the problem");
  const int dim = p.head_dim, dim_v = p.dim_v();
  const float scale = p.softmax_scale();
  const std::int64_t slots = static_cast<std::int64_t>(mask.count.size());
  const int groups = shape.m / shape.rows_per_group;
  std::vector<std::int64_t> skipped(static_cast<std::size_t>(slots), 0);
  cpu::parallel_for(slots, cpu::cpu_threads(), [&](std::int64_t item, int) {
    const int mb = static_cast<int>(item % mask.m_blocks);
    const int h = static_cast<int>((item / mask.m_blocks) % p.heads_q);
    const int b = static_cast<int>(item / (static_cast<std::int64_t>(mask.m_blocks) * p.heads_q));
    const int kvh = p.kv_head_of(h);
    const double lambda = config.for_head(h).pv_threshold;
    const int row0 = mb * shape.m;
    const int rows = shape.m;  // padded like the kernel's tile: rows past seq_q have Q = 0
    std::vector<float> q(static_cast<std::size_t>(rows) * dim, 0.0f), o(static_cast<std::size_t>(rows) * dim_v, 0.0f);
    std::vector<float> row_max(static_cast<std::size_t>(rows), -INFINITY),
        row_sum(static_cast<std::size_t>(rows), 0.0f);
    std::vector<float> s(static_cast<std::size_t>(rows) * shape.n), kt(static_cast<std::size_t>(shape.n) * dim),
        vt(static_cast<std::size_t>(shape.n) * dim_v);
    for (int r = 0; r < rows && row0 + r < p.seq_q; ++r)
      for (int d = 0; d < dim; ++d)
        q[static_cast<std::size_t>(r) * dim + d] =
            load_as_float(args.q.data, args.q.dtype, args.q.offset(b, row0 + r, h, d));
    const std::int32_t* list = mask.index.data() + static_cast<std::size_t>(item) * mask.n_blocks;
    for (int c = 0; c < mask.count[static_cast<std::size_t>(item)]; ++c) {
      const int key0 = list[c] * shape.n;
      const int keys = std::min(shape.n, p.seq_kv - key0);
      for (int j = 0; j < keys; ++j) {
        for (int d = 0; d < dim; ++d)
          kt[static_cast<std::size_t>(j) * dim + d] =
              load_as_float(args.k.data, args.k.dtype, args.k.offset(b, key0 + j, kvh, d));
        for (int d = 0; d < dim_v; ++d)
          vt[static_cast<std::size_t>(j) * dim_v + d] =
              load_as_float(args.v.data, args.v.dtype, args.v.offset(b, key0 + j, kvh, d));
      }
      for (int g = 0; g < groups; ++g) {
        bool skip_pv = true;
        for (int r = g * shape.rows_per_group; r < (g + 1) * shape.rows_per_group; ++r) {
          const std::int64_t begin = p.key_begin(row0 + r), end = p.key_end(row0 + r);
          float* srow = s.data() + static_cast<std::size_t>(r) * shape.n;
          float tile_max = -INFINITY;
          for (int j = 0; j < shape.n; ++j) {
            const int key = key0 + j;
            if (j >= keys || key < begin || key >= end) {
              srow[j] = -INFINITY;
              continue;
            }
            float dot = 0;
            const float* qr = q.data() + static_cast<std::size_t>(r) * dim;
            const float* kr = kt.data() + static_cast<std::size_t>(j) * dim;
            for (int d = 0; d < dim; ++d) dot += qr[d] * kr[d];
            srow[j] = dot;
            tile_max = std::max(tile_max, dot);
          }
          const float old_max = row_max[static_cast<std::size_t>(r)];
          const float new_max = std::max(old_max, tile_max);
          // The kernel's test: (tile max − new max)·scale < −λ for every row of the group.
          if (!((tile_max - new_max) * scale < -lambda)) skip_pv = false;
          const float max_scaled = new_max == -INFINITY ? 0.0f : new_max * scale;
          const float correction = std::exp(old_max * scale - max_scaled);
          row_max[static_cast<std::size_t>(r)] = new_max;
          float sum = 0;
          for (int j = 0; j < shape.n; ++j) sum += (srow[j] = std::exp(srow[j] * scale - max_scaled));
          row_sum[static_cast<std::size_t>(r)] = row_sum[static_cast<std::size_t>(r)] * correction + sum;
          float* orow = o.data() + static_cast<std::size_t>(r) * dim_v;
          for (int d = 0; d < dim_v; ++d) orow[d] *= correction;
        }
        if (skip_pv) {
          ++skipped[static_cast<std::size_t>(item)];
          continue;
        }
        for (int r = g * shape.rows_per_group; r < (g + 1) * shape.rows_per_group; ++r) {
          float* orow = o.data() + static_cast<std::size_t>(r) * dim_v;
          const float* srow = s.data() + static_cast<std::size_t>(r) * shape.n;
          for (int j = 0; j < keys; ++j) {
            const float pj = srow[j];
            if (pj == 0.0f) continue;
            const float* vr = vt.data() + static_cast<std::size_t>(j) * dim_v;
            for (int d = 0; d < dim_v; ++d) orow[d] += pj * vr[d];
          }
        }
      }
    }
    for (int r = 0; r < rows && row0 + r < p.seq_q; ++r) {
      const float sum = row_sum[static_cast<std::size_t>(r)];
      // A NaN anywhere in the row's scores makes its sum NaN: O and LSE NaN, like the dense kernels.
      const float inverse = sum > 0 ? 1.0f / sum : (std::isnan(sum) ? sum : 0.0f);
      for (int d = 0; d < dim_v; ++d)
        store_from_float(args.o.data, args.o.dtype, args.o.offset(b, row0 + r, h, d),
                         o[static_cast<std::size_t>(r) * dim_v + d] * inverse);
      if (!args.lse.empty())
        args.lse.data[(static_cast<std::int64_t>(b) * p.heads_q + h) * p.seq_q + row0 + r] =
            sum > 0 ? row_max[static_cast<std::size_t>(r)] * scale + std::log(sum)
                    : (std::isnan(sum) ? sum : -INFINITY);
    }
  });
  if (stats != nullptr) {
    stats->visible_blocks = visible_block_count(p, shape);
    stats->computed_blocks = mask.kept_blocks();
    stats->pv_groups = stats->computed_blocks * groups;
    stats->pv_skipped_groups = std::accumulate(skipped.begin(), skipped.end(), std::int64_t{0});
  }
}

}  // namespace attnsuite::sparse
