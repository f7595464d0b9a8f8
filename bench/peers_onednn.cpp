// The oneDNN peer: one primitive per workload where oneDNN has one (post-ops where the workload
// is more than the primitive's own operation), created once, executed per run (bench/README.md,
// "Peers").
#include <oneapi/dnnl/dnnl.hpp>
#include <memory>
#include <unordered_map>
#include <vector>

#include "bench/peers.h"

namespace fuse::bench {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::primitive_attr;
using dnnl::prop_kind;
using Tag = memory::format_tag;
constexpr memory::data_type kF32 = memory::data_type::f32;

constexpr float kSqrt2Pi = 2.5066282746f;  // examples/gaussian_pdf.expr's SQRT_2PI, in f32
constexpr float kLayerNormEps = 1e-5f;      // examples/layernorm.expr's EPS

struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
};

Context& context() {
  static Context c;
  return c;
}

memory::desc desc(memory::dims dims, Tag tag) { return memory::desc(dims, kF32, tag); }

/// A memory object over one of fuse's arrays (oneDNN does not copy it).
memory wrap(const memory::desc& d, const float* p) { return memory(d, context().engine, const_cast<float*>(p)); }

/// One run: execute the primitive on its bound arguments and wait for it.
std::function<void()> run_bound(dnnl::primitive p, std::unordered_map<int, memory> args) {
  return [p, args]() mutable {
    p.execute(context().stream, args);
    context().stream.wait();
  };
}

dnnl::post_ops eltwise_chain(std::initializer_list<std::tuple<algorithm, float, float>> ops) {
  dnnl::post_ops po;
  for (auto [alg, alpha, beta] : ops) po.append_eltwise(1.f, alg, alpha, beta);
  return po;
}

/// src0 OP src1 (NumPy broadcasting of src1), then `post` applied to the result.
std::function<void()> binary(algorithm alg, const memory::desc& d0, const float* s0, const memory::desc& d1,
                             const float* s1, float* dst, const dnnl::post_ops& post = {}) {
  primitive_attr attr;
  attr.set_post_ops(post);
  dnnl::binary::primitive_desc pd({alg, d0, d1, d0}, attr, context().engine);
  return run_bound(dnnl::binary(pd), {{DNNL_ARG_SRC_0, wrap(d0, s0)}, {DNNL_ARG_SRC_1, wrap(d1, s1)}, {DNNL_ARG_DST, wrap(d0, dst)}});
}

}  // namespace

std::function<void()> onednn_peer(const std::string& kind, const ir::TensorMap& i, ir::TensorMap& o) {
  if (kind == "add") {
    int64_t n = dim(i, "a", 0), m = dim(i, "a", 1);
    return binary(algorithm::binary_add, desc({n, m}, Tag::ab), in(i, "a"), desc({1, m}, Tag::ab), in(i, "b"), out(o, "c"));
  }
  if (kind == "normalize_rgb") {
    // img - mean, then a binary post-op dividing by std, both broadcast along the pixels.
    int64_t p = dim(i, "img", 0);
    memory::desc pixels = desc({p, 3}, Tag::ab), channels = desc({1, 3}, Tag::ab);
    dnnl::post_ops po;
    po.append_binary(algorithm::binary_div, channels);
    primitive_attr attr;
    attr.set_post_ops(po);
    dnnl::binary::primitive_desc pd({algorithm::binary_sub, pixels, channels, pixels}, attr, context().engine);
    return run_bound(dnnl::binary(pd), {{DNNL_ARG_SRC_0, wrap(pixels, in(i, "img"))},
                                        {DNNL_ARG_SRC_1, wrap(channels, in(i, "mean"))},
                                        {DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1, wrap(channels, in(i, "std"))},
                                        {DNNL_ARG_DST, wrap(pixels, out(o, "y"))}});
  }
  if (kind == "add_vectors") {
    memory::desc d = desc({count(i, "a")}, Tag::a);
    return binary(algorithm::binary_add, d, in(i, "a"), d, in(i, "b"), out(o, "c"));
  }
  if (kind == "gaussian_pdf") {
    // x - mu (mu read at run time, broadcast), then square and exp as post-ops, whose output
    // scales carry -0.5 / sigma^2 and 1 / (sigma sqrt(2 pi)): sigma is fixed when the primitive
    // is created. (Not eltwise_linear post-ops: after another eltwise post-op, Debian's oneDNN
    // 2.6 binary kernel (jit:uni) leaves them out, which the check against fuse caught.)
    float sigma = *in(i, "sigma");
    memory::desc d = desc({count(i, "x")}, Tag::a);
    dnnl::post_ops po;
    po.append_eltwise(-0.5f / (sigma * sigma), algorithm::eltwise_square, 0.f, 0.f);
    po.append_eltwise(1.f / (sigma * kSqrt2Pi), algorithm::eltwise_exp, 0.f, 0.f);
    return binary(algorithm::binary_sub, d, in(i, "x"), desc({1}, Tag::a), in(i, "mu"), out(o, "y"), po);
  }
  if (kind == "hidden_layer") {
    memory::desc d = desc({count(i, "greyscales")}, Tag::a);
    return binary(algorithm::binary_mul, d, in(i, "greyscales"), d, in(i, "weights"), out(o, "activations"),
                  eltwise_chain({{algorithm::eltwise_linear, 1.f / 255.f, 0.f}, {algorithm::eltwise_tanh, 0.f, 0.f}}));
  }
  if (kind == "sum" || kind == "max") {
    memory::desc src = desc({count(i, "x")}, Tag::a), dst = desc({1}, Tag::a);
    dnnl::reduction::primitive_desc pd(
        {kind == "sum" ? algorithm::reduction_sum : algorithm::reduction_max, src, dst, 0.f, 0.f}, context().engine);
    return run_bound(dnnl::reduction(pd), {{DNNL_ARG_SRC, wrap(src, in(i, "x"))},
                                      {DNNL_ARG_DST, wrap(dst, out(o, kind == "sum" ? "total" : "largest"))}});
  }
  if (kind == "softmax") {
    memory::desc d = desc({dim(i, "x", 0), dim(i, "x", 1)}, Tag::ab);
    dnnl::softmax_forward::primitive_desc pd({prop_kind::forward_inference, d, 1}, context().engine);
    return run_bound(dnnl::softmax_forward(pd), {{DNNL_ARG_SRC, wrap(d, in(i, "x"))}, {DNNL_ARG_DST, wrap(d, out(o, "y"))}});
  }
  if (kind == "layernorm") {
    int64_t n = dim(i, "x", 0), dd = dim(i, "x", 1);
    memory::desc d = desc({n, dd}, Tag::ab), channels = desc({dd}, Tag::a);
    dnnl::layer_normalization_forward::primitive_desc pd(
        {prop_kind::forward_inference, d, kLayerNormEps,
         dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift},
        context().engine);
    // Mean and variance are outputs of the primitive; they live with the closure.
    auto stats = std::make_shared<std::vector<float>>(2 * n);
    memory::desc stat = desc({n}, Tag::a);
    auto run = run_bound(dnnl::layer_normalization_forward(pd), {{DNNL_ARG_SRC, wrap(d, in(i, "x"))},
                                                            {DNNL_ARG_SCALE, wrap(channels, in(i, "gamma"))},
                                                            {DNNL_ARG_SHIFT, wrap(channels, in(i, "beta"))},
                                                            {DNNL_ARG_MEAN, wrap(stat, stats->data())},
                                                            {DNNL_ARG_VARIANCE, wrap(stat, stats->data() + n)},
                                                            {DNNL_ARG_DST, wrap(d, out(o, "y"))}});
    return [run, stats] { run(); };
  }
  if (kind == "transpose") {
    // A reorder from row-major [N, M] to column-major [N, M], which is row-major [M, N].
    int64_t n = dim(i, "x", 0), m = dim(i, "x", 1);
    memory src = wrap(desc({n, m}, Tag::ab), in(i, "x")), dst = wrap(desc({n, m}, Tag::ba), out(o, "xt"));
    return run_bound(dnnl::reorder(src, dst), {{DNNL_ARG_FROM, src}, {DNNL_ARG_TO, dst}});
  }
  if (kind == "matmul" || kind == "mlp_layer") {
    // Plain row-major weights, not a blocked layout prepared ahead: fuse packs at run time too.
    bool mlp = kind == "mlp_layer";
    const char* a_name = mlp ? "x" : "a";
    const char* b_name = mlp ? "w" : "b";
    int64_t m = dim(i, a_name, 0), k = dim(i, a_name, 1), n = dim(i, b_name, 1);
    memory::desc a = desc({m, k}, Tag::ab), b = desc({k, n}, Tag::ab), c = desc({m, n}, Tag::ab);
    std::unordered_map<int, memory> args = {{DNNL_ARG_SRC, wrap(a, in(i, a_name))},
                                            {DNNL_ARG_WEIGHTS, wrap(b, in(i, b_name))},
                                            {DNNL_ARG_DST, wrap(c, out(o, mlp ? "y" : "c"))}};
    if (!mlp) return run_bound(dnnl::matmul(dnnl::matmul::primitive_desc({a, b, c}, context().engine)), args);
    // Bias and relu as the primitive's own bias and eltwise post-op (its epilogue fusion).
    memory::desc bias = desc({1, n}, Tag::ab);
    args[DNNL_ARG_BIAS] = wrap(bias, in(i, "b"));
    primitive_attr attr;
    attr.set_post_ops(eltwise_chain({{algorithm::eltwise_relu, 0.f, 0.f}}));
    return run_bound(dnnl::matmul(dnnl::matmul::primitive_desc({a, b, bias, c}, attr, context().engine)), args);
  }
  return nullptr;
}

}  // namespace fuse::bench
