// The schedule decides: each kernel's loop form (ir::LoopForm) per target, the parameters that
// form reads, and verify(Program) catching programs that break the invariants codegen relies on.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "frontends/api.h"
#include "ir/kernel_forms.h"
#include "ir/target.h"
#include "ir/printer.h"
#include "ir/program.h"
#include "ir/verifier.h"
#include "passes/pipeline.h"

using namespace fuse;
using ir::LoopForm;

namespace {

const Dim N = sym("N"), M = sym("M"), K = sym("K");

// The forms of a one-output graph's kernels, in launch order, on `target`.
std::vector<LoopForm> forms_of(const ir::Graph& g, const ir::Target& target) {
  passes::PipelineOptions options;
  options.target = target;
  ir::Program p = passes::run_pipeline(g, options).program;
  REQUIRE(ir::verify(p).empty());
  std::vector<LoopForm> forms;
  for (int ki : p.launch_order) forms.push_back(p.kernels[ki].schedule.form);
  return forms;
}

struct FormCase {
  std::string name;
  ir::Graph graph;
  LoopForm cpu, cuda;
};

std::vector<FormCase> form_cases() {
  std::vector<FormCase> cases;
  auto add = [&](std::string name, LoopForm cpu, LoopForm cuda, auto build) {
    Graph g;
    build(g);
    cases.push_back({std::move(name), g.ir(), cpu, cuda});
  };
  add("add", LoopForm::Contiguous, LoopForm::GridStride, [](Graph& g) {
    Tensor a = g.input("a", DType::F32, {N}), b = g.input("b", DType::F32, {N});
    g.output("y", a + b);
  });
  add("bias row", LoopForm::Rows, LoopForm::GridStride, [](Graph& g) {
    Tensor x = g.input("x", DType::F32, {N, M}), b = g.input("b", DType::F32, {M});
    g.output("y", x + b);
  });
  add("transpose", LoopForm::TiledRows, LoopForm::SharedTileTranspose, [](Graph& g) {
    Tensor x = g.input("x", DType::F32, {N, M});
    g.output("y", transpose(x));
  });
  add("softmax", LoopForm::ReductionRows, LoopForm::BlockPerRow, [](Graph& g) {
    Tensor x = g.input("x", DType::F32, {N, M});
    Tensor e = exp(x - max(x, 1, true));
    g.output("y", e / sum(e, 1, true));
  });
  add("sum of everything", LoopForm::SplitReduction, LoopForm::TwoStage, [](Graph& g) {
    Tensor x = g.input("x", DType::F32, {N});
    g.output("s", sum(x * x));
  });
  add("column sums", LoopForm::ColumnReduction, LoopForm::BlockPerRow, [](Graph& g) {
    Tensor x = g.input("x", DType::F32, {N, M});
    g.output("s", sum(x, 0));
  });
  add("matmul with an epilogue", LoopForm::BlockedMatmul, LoopForm::SharedTileMatmul, [](Graph& g) {
    Tensor a = g.input("a", DType::F32, {N, K}), b = g.input("b", DType::F32, {K, M});
    g.output("y", exp(matmul(a, b)));
  });
  return cases;
}

}  // namespace

TEST_CASE("the schedule chooses each kernel's loop form for its target") {
  for (FormCase& c : form_cases()) {
    INFO(c.name);
    std::vector<LoopForm> cpu = forms_of(c.graph, ir::Target::cpu("avx512"));
    std::vector<LoopForm> cuda = forms_of(c.graph, ir::Target::cuda(80));
    REQUIRE(cpu.size() == 1);
    REQUIRE(cuda.size() == 1);
    CHECK(ir::loop_form_name(cpu[0]) == ir::loop_form_name(c.cpu));
    CHECK(ir::loop_form_name(cuda[0]) == ir::loop_form_name(c.cuda));
  }
}

// A kernel's streaming threshold: Target::result_streaming_bytes where it writes only results,
// Target::streaming_bytes where a later kernel reads an output (an intermediate, or a result
// that is also an operand), since that kernel would find a streamed output only in memory.
TEST_CASE("outputs that a later kernel reads stream from a higher threshold than results") {
  auto kernel_writing = [](const ir::Program& p, const std::string& name) -> const ir::Kernel& {
    ir::BufferId b = p.find_buffer(name);
    for (const ir::Kernel& k : p.kernels)
      if (std::find(k.outputs.begin(), k.outputs.end(), b) != k.outputs.end()) return k;
    FAIL("no kernel writes " << name);
    return p.kernels.front();
  };
  Graph g;
  Tensor x = g.input("x", DType::F32, {N, M}), w = g.input("w", DType::F32, {M, K});
  Tensor y = exp(x);
  g.output("y", y);                      // a result that the matmul reads too
  g.output("t", matmul(y, w));
  g.output("z", transpose(x) * 2.0f);    // read by nothing after it
  passes::PipelineOptions options;
  options.target = ir::Target::cpu("stream=1M,stream_results=64K");
  ir::Program p = passes::run_pipeline(g.ir(), options).program;
  REQUIRE(ir::verify(p).empty());
  REQUIRE(p.kernels.size() == 3);
  CHECK(kernel_writing(p, "y").schedule.form == LoopForm::Contiguous);
  CHECK(kernel_writing(p, "y").schedule.cpu.streaming_bytes == 1 << 20);
  CHECK(kernel_writing(p, "z").schedule.form == LoopForm::TiledRows);
  CHECK(kernel_writing(p, "z").schedule.cpu.streaming_bytes == 64 << 10);
  // The defaults: 32 MiB and 8 MiB.
  options.target = ir::Target::cpu("");
  p = passes::run_pipeline(g.ir(), options).program;
  CHECK(kernel_writing(p, "y").schedule.cpu.streaming_bytes == int64_t{32} << 20);
  CHECK(kernel_writing(p, "z").schedule.cpu.streaming_bytes == int64_t{8} << 20);

  // An intermediate: softmax's exponentials, which the row sums and the column sums read.
  Graph h;
  Tensor v = h.input("x", DType::F32, {N, M});
  Tensor e = exp(v - max(v, 1, true));
  h.output("s", sum(e / sum(e, 1, true) * 2.0f, 0));
  options.target = ir::Target::cpu("stream=1M,stream_results=64K");
  p = passes::run_pipeline(h.ir(), options).program;
  REQUIRE(ir::verify(p).empty());
  int intermediates = 0;
  for (const ir::Kernel& k : p.kernels) {
    bool writes_intermediate = false;
    for (ir::BufferId b : k.outputs) writes_intermediate |= p.buffers[b].role == ir::BufferRole::Intermediate;
    intermediates += writes_intermediate;
    CHECK(k.schedule.cpu.streaming_bytes == (writes_intermediate ? 1 << 20 : 64 << 10));
  }
  CHECK(intermediates >= 1);
}

TEST_CASE("the printed schedule shows the form and only the parameters its code reads") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {N, M});
  g.output("y", transpose(x));
  passes::PipelineOptions options;
  std::string cpu = ir::print_program(passes::run_pipeline(g.ir(), options).program);
  CHECK_THAT(cpu, Catch::Contains("form=tiled_rows") && Catch::Contains("transpose_block=16"));
  CHECK_THAT(cpu, !Catch::Contains("accumulators") && !Catch::Contains("parallel_dims") && !Catch::Contains(" mc="));
  // The streaming threshold, for the forms that stream: it is part of the disk cache's key (the
  // printed program), so code compiled for another threshold is never reused.
  CHECK_THAT(cpu, Catch::Contains("streaming_bytes=8388608"));
  options.target = ir::Target::cpu("stream=64K");
  CHECK_THAT(ir::print_program(passes::run_pipeline(g.ir(), options).program), Catch::Contains("streaming_bytes=65536"));
  options.target = ir::Target::cuda(80);
  std::string cuda = ir::print_program(passes::run_pipeline(g.ir(), options).program);
  CHECK_THAT(cuda, Catch::Contains("form=shared_tile_transpose") && Catch::Contains("tile_rows=32") &&
                       Catch::Contains("shared_cols=33"));
  CHECK_THAT(cuda, !Catch::Contains("tile_cols") && !Catch::Contains("reduction=") && !Catch::Contains("vector_bytes"));
}

TEST_CASE("verify(Program) names each broken invariant") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {N, M});
  Tensor e = exp(x - max(x, 1, true));
  g.output("y", e / sum(e, 1, true));
  g.output("t", transpose(x));
  ir::Program good = passes::run_pipeline(g.ir()).program;
  REQUIRE(ir::verify(good).empty());
  REQUIRE(good.kernels.size() == 2);

  auto problems_of = [](const ir::Program& p) {
    std::string all;
    for (const std::string& s : ir::verify(p)) all += s + "\n";
    return all;
  };
  SECTION("a CUDA form on a CPU schedule") {
    ir::Program p = good;
    p.kernels[0].schedule.form = LoopForm::BlockPerRow;
    CHECK_THAT(problems_of(p), Catch::Contains("loop form block_per_row is not a form of target cpu"));
  }
  SECTION("a split reduction on a kernel with rows") {
    ir::Program p = good;
    for (ir::Kernel& k : p.kernels)
      if (k.kind == ir::KernelKind::RowWise) k.schedule.form = LoopForm::SplitReduction;
    CHECK_THAT(problems_of(p), Catch::Contains("needs a reduction to single elements"));
  }
  SECTION("a kernel that reads a buffer before it is written") {
    ir::Program p = good;
    p.kernels[0].inputs[0] = p.outputs[0].buffer;
    CHECK_THAT(problems_of(p), Catch::Contains("before any kernel writes it"));
  }
  SECTION("a buffer of the wrong dtype") {
    ir::Program p = good;
    p.buffers[p.kernels[0].outputs[0]].dtype = DType::F64;
    CHECK_THAT(problems_of(p), Catch::Contains("but buffer"));
  }
  SECTION("a launch order that runs one kernel twice and leaves one out") {
    ir::Program p = good;
    p.launch_order = {0, 0};
    std::string problems = problems_of(p);
    CHECK_THAT(problems, Catch::Contains("twice") && Catch::Contains("leaves out"));
  }
  SECTION("a tiled transpose without a tile") {
    ir::Program p = good;
    for (ir::Kernel& k : p.kernels)
      if (k.schedule.form == LoopForm::TiledRows) k.schedule.cpu.transpose_block = 0;
    CHECK_THAT(problems_of(p), Catch::Contains("needs transpose_block >= 1"));
    CHECK_THROWS_WITH(ir::verify_or_throw(p, "after scheduling"), Catch::Contains("invalid program after scheduling:"));
  }
}

TEST_CASE("combiner_regroups tells associative combiners from order-dependent folds") {
  auto attrs = [](auto fn, ir::DType t, double init) {
    Graph g;
    Tensor x = g.input("x", t, {sym("N")});
    g.output("r", reduce(fn, x, init));
    const ir::Graph& ir = g.ir();
    for (const ir::Node& n : ir.nodes)
      if (n.kind == ir::OpKind::Reduce) return n.as<ir::ReduceAttrs>();
    FAIL("no reduce node");
    return ir::ReduceAttrs{};
  };
  using ir::DType;
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64}) {
    INFO(ir::dtype_name(t));
    CHECK(ir::combiner_regroups(attrs([](Scalar a, Scalar v) { return a + v; }, t, 0.0), t));
    CHECK(ir::combiner_regroups(attrs([](Scalar a, Scalar v) { return maximum(a, abs(v)); }, t, 0.0), t));
    CHECK(ir::combiner_regroups(attrs([](Scalar, Scalar v) { return v; }, t, 3.0), t));
    CHECK_FALSE(ir::combiner_regroups(attrs([](Scalar a, Scalar v) { return a + v * v; }, t, 0.0), t));
    CHECK_FALSE(ir::combiner_regroups(attrs([](Scalar a, Scalar v) { return a * 2 + v; }, t, 0.0), t));
    // An associative combiner whose init is not its identity: folding a chunk from init adds it twice.
    CHECK_FALSE(ir::combiner_regroups(attrs([](Scalar a, Scalar v) { return a + v; }, t, 1.0), t));
  }
  CHECK(ir::combiner_regroups(attrs([](Scalar a, Scalar v) { return logical_or(a, v); }, DType::Bool, 0.0), DType::Bool));
}

// Which float max reductions may skip NaN (the CPU's SIMD max then keeps no NaN tracker): those
// whose NaN would reach every output that reads them anyway, through a sum of the same row.
TEST_CASE("nan_reaches_outputs_anyway: a NaN in the max's row reaches every output through a sum") {
  // The first row kernel's max reduction, and the kernel.
  auto judged = [](const Graph& g) {
    ir::Program p = passes::run_pipeline(g.ir()).program;
    for (const ir::Kernel& k : p.kernels)
      for (ir::NodeId id : ir::reduce_nodes(k))
        if (k.body.node(id).as<ir::ReduceAttrs>().kind == ir::ReduceKind::Max) {
          INFO(ir::print_program(p));
          REQUIRE(p.kernels.size() == 1);
          return ir::nan_reaches_outputs_anyway(k, id);
        }
    FAIL("no max reduction");
    return false;
  };
  for (ir::DType t : {ir::DType::F32, ir::DType::F64}) {
    INFO(ir::dtype_name(t));
    auto softmax_parts = [&](Graph& g) {
      Tensor x = g.input("x", t, {N, M});
      Tensor m = max(x, 1, true);
      return std::tuple{x, m, exp(x - m)};
    };
    {
      Graph g;
      auto [x, m, e] = softmax_parts(g);
      g.output("y", e / sum(e, 1, true));
      CHECK(judged(g));
    }
    {  // logsumexp reads the max itself, and the NaN sum with it
      Graph g;
      auto [x, m, e] = softmax_parts(g);
      g.output("lse", m + log(sum(e, 1, true)));
      CHECK(judged(g));
    }
    {  // the max as an output: it must be NaN itself
      Graph g;
      auto [x, m, e] = softmax_parts(g);
      g.output("y", e / sum(e, 1, true));
      g.output("m", m);
      CHECK_FALSE(judged(g));
    }
    {  // no sum: x - max is NaN only where x is
      Graph g;
      auto [x, m, e] = softmax_parts(g);
      g.output("y", e);
      CHECK_FALSE(judged(g));
    }
    {  // the sum's input drops NaN (maximum propagates it in NumPy, but no op that may not is trusted)
      Graph g;
      auto [x, m, e] = softmax_parts(g);
      Tensor d = where(e > 0.5, e, e * 0);
      g.output("y", e / sum(d, 1, true));
      CHECK_FALSE(judged(g));
    }
    {  // the sum is of another input: a NaN in x need not reach it
      Graph g;
      auto [x, m, e] = softmax_parts(g);
      Tensor z = g.input("z", t, {N, M});
      g.output("y", e / sum(exp(z), 1, true));
      CHECK_FALSE(judged(g));
    }
  }
}
