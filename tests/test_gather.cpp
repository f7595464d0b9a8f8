// take / take_along_axis compiled as indexed loads inside their consumer's kernel (issue 16),
// and the in-kernel error record (ir/index_check.h): compiled results against the interpreter
// for every dtype, index dtype, odd sizes (1, 7, 1023), negative indices, every axis of 2-D and
// 3-D operands and broadcasting consumers, on the CPU and on the CUDA simulator (PTX through
// ptxas); the kernel counts of the fusion claims; the run-time error's exact text with the
// caller's outputs left as they were (host arrays and device buffers).
#include <catch2/catch.hpp>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <optional>
#include <random>

#include "codegen/cpu_codegen.h"
#include "codegen/cuda_codegen.h"
#include "frontends/api.h"
#include "frontends/compile.h"
#include "ir/dot.h"
#include "ir/index_check.h"
#include "ir/interpreter.h"
#include "ir/rounding_model.h"
#include "passes/fusion.h"
#include "passes/pipeline.h"
#include "examples.h"
#include "ptxas.h"
#include "random_graph.h"
#include "runtime/bundle.h"

using namespace fuse;
using ir::TensorMap;

namespace {

ir::HostArray random_values(DType dtype, ir::ConcreteShape shape, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-4, 4);
  ir::HostArray a(dtype, std::move(shape));
  for (int64_t i = 0; i < a.size(); ++i) {
    if (ir::is_float(dtype)) a.set_f64(i, u(rng));
    else if (dtype == DType::Bool) a.set_i64(i, rng() & 1);
    else a.set_i64(i, static_cast<int64_t>(std::floor(u(rng) * 100)));
  }
  return a;
}

/// Indices in [-size, size): negative ones count from the end.
ir::HostArray random_indices(DType dtype, ir::ConcreteShape shape, int64_t size, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> u(-size, size - 1);
  ir::HostArray a(dtype, std::move(shape));
  for (int64_t i = 0; i < a.size(); ++i) a.set_i64(i, u(rng));
  return a;
}

const DType kValueTypes[] = {DType::F32, DType::F64, DType::I32, DType::I64, DType::Bool};
const DType kIndexTypes[] = {DType::I32, DType::I64};

int kernel_count(const Graph& g) { return static_cast<int>(passes::run_pipeline(g.ir()).program.kernels.size()); }

/// The CPU executable (every kernel compiled, none left to the interpreter) and the CUDA
/// simulator against the interpreter, within the rounding model's bounds.
void check_cpu(const Graph& g, const TensorMap& inputs) {
  ir::ValuesAndBounds expected = ir::interpret_with_bounds(g.ir(), inputs);
  runtime::Executable exe = compile(g);
  CHECK(exe.compiled_kernel_count() == static_cast<int>(exe.program().kernels.size()));
  CHECK(testing::compare_outputs(expected, exe.run(inputs)) == "");
  INFO("on the CUDA simulator");
  CHECK(testing::compare_outputs(expected, compile_cuda(g, Target::cuda_sim())->run_host(inputs)) == "");
}

/// total = sum(x[n, labels[n]]) over x[N, 10] f32 and labels[N] i64: one pick per row.
void add_pick_total(Graph& g) {
  Tensor x = g.input("x", DType::F32, {ir::Dim::symbol("N"), 10});
  Tensor labels = g.input("labels", DType::I64, {ir::Dim::symbol("N")});
  g.output("total", sum(take_along_axis(x, expand_dims(labels, 1), 1)));
}

}  // namespace

TEST_CASE("CPU take equals the interpreter for every dtype, index dtype and size 1, 7, 1023", "[gather][cpu][sim]") {
  for (DType t : kValueTypes)
    for (DType it : kIndexTypes)
      for (int64_t n : {1, 7, 1023}) {
        INFO(ir::dtype_name(t) << " indices " << ir::dtype_name(it) << " n = " << n);
        uint32_t seed = static_cast<uint32_t>(n * 31 + static_cast<int>(t) * 7 + static_cast<int>(it));
        Graph g;
        Tensor x = g.input("x", t, {n});
        Tensor i = g.input("i", it, {n + 2});
        g.output("y", take(x, i));
        if (t != DType::Bool) g.output("z", take(x, i) * take(x, i) + sum(x));
        check_cpu(g, {{"x", random_values(t, {n}, seed)}, {"i", random_indices(it, {n + 2}, n, seed + 1)}});
      }
}

TEST_CASE("CPU take and take_along_axis over every axis of 2-D and 3-D operands", "[gather][cpu][sim]") {
  const ir::ConcreteShape shapes[] = {{7, 3}, {1, 7}, {3, 1, 5}, {2, 7, 3}};
  for (const ir::ConcreteShape& shape : shapes)
    for (int axis = 0; axis < static_cast<int>(shape.size()); ++axis)
      for (DType t : {DType::F32, DType::I64}) {
        INFO(ir::shape_str(shape) << " axis " << axis << " " << ir::dtype_name(t));
        uint32_t seed = static_cast<uint32_t>(axis * 13 + shape[0] + static_cast<int>(t));
        Graph g;
        std::vector<ir::Dim> dims(shape.begin(), shape.end());
        Tensor x = g.input("x", t, dims);
        Tensor i = g.input("i", DType::I32, {2, 3});  // a 2-D index: take inserts both dims
        ir::ConcreteShape along = shape;
        along[axis] = 4;
        std::vector<ir::Dim> along_dims(along.begin(), along.end());
        Tensor j = g.input("j", DType::I64, along_dims);
        g.output("taken", take(x, i, axis));
        g.output("along", take_along_axis(x, j, axis) + 1);
        check_cpu(g, {{"x", random_values(t, shape, seed)},
                      {"i", random_indices(DType::I32, {2, 3}, shape[axis], seed + 1)},
                      {"j", random_indices(DType::I64, along, shape[axis], seed + 2)}});
      }
}

TEST_CASE("CPU take_along_axis broadcasts x and the indices, and takes broadcasting consumers", "[gather][cpu][sim]") {
  for (int64_t n : {1, 7, 1023}) {
    INFO("n = " << n);
    Graph g;
    Tensor x = g.input("x", DType::F64, {1, 5});
    Tensor i = g.input("i", DType::I32, {n, 1});
    Tensor b = g.input("b", DType::F64, {n, 1});
    Tensor r = g.input("r", DType::F64, {6});
    Tensor idx6 = g.input("k", DType::I64, {n, 6});
    g.output("along", take_along_axis(x, idx6, 1) * b);  // x broadcast along rows, b along columns
    g.output("column", take_along_axis(x, i, 1) + r);    // a [n, 1] result broadcast to [n, 6]
    g.output("rows", take(r, i) - b);                   // take's [n, 1] result, same shape
    check_cpu(g, {{"x", random_values(DType::F64, {1, 5}, 1)},
                  {"i", random_indices(DType::I32, {n, 1}, 5, 2)},
                  {"b", random_values(DType::F64, {n, 1}, 3)},
                  {"r", random_values(DType::F64, {6}, 4)},
                  {"k", random_indices(DType::I64, {n, 6}, 5, 5)}});
  }
}

TEST_CASE("takes in reduction prologues: rows, columns, to one element, row-wise softmax", "[gather][cpu][sim]") {
  for (int64_t n : {1, 7, 1023}) {
    INFO("n = " << n);
    Graph g;
    Tensor x = g.input("x", DType::F32, {9, 5});
    Tensor i = g.input("i", DType::I64, {n});
    Tensor j = g.input("j", DType::I32, {n, 5});
    Tensor rows = take(x, i, 0);  // [n, 5]
    g.output("row_sums", sum(rows * 2.0f, 1));
    g.output("column_max", max(take_along_axis(x, j, 0), 0));
    g.output("total", sum(rows));
    g.output("softmax", exp(rows) / sum(exp(rows), 1, true));
    g.output("first", argmax(rows, 1));
    check_cpu(g, {{"x", random_values(DType::F32, {9, 5}, 11)},
                  {"i", random_indices(DType::I64, {n}, 9, 12)},
                  {"j", random_indices(DType::I32, {n, 5}, 9, 13)}});
  }
}

// Cross-entropy's pick, logits[n, label[n]] read in a reduction over the rows, runs as vectors
// of gathers (ir::picks_along_rows): odd row counts (the masked tail), negative labels, every
// value and index dtype, and the scalar form's results and errors.
TEST_CASE("a pick of one element per row in a reduction over the rows runs as gathers", "[gather][cpu][sim]") {
  for (DType value : {DType::F32, DType::F64, DType::I32})
    for (DType index : kIndexTypes)
      for (int64_t n : {1, 7, 17, 1023}) {
        INFO(ir::dtype_name(value) << " values, " << ir::dtype_name(index) << " labels, n = " << n);
        Graph g;
        Tensor x = g.input("x", value, {ir::Dim::symbol("N"), 10});
        Tensor labels = g.input("labels", index, {ir::Dim::symbol("N")});
        Tensor picked = take_along_axis(x, expand_dims(labels, 1), 1);  // [N, 1]
        g.output("total", sum(picked));
        g.output("largest", max(picked * 2));
        if (ir::is_float(value)) {
          Tensor m = max(x, 1, true);
          g.output("loss", mean(m + log(sum(exp(x - m), 1, true)) - picked));
        }
        REQUIRE(kernel_count(g) == (ir::is_float(value) ? 2 : 1));
        check_cpu(g, {{"x", random_values(value, {n, 10}, 21)}, {"labels", random_indices(index, {n}, 10, 22)}});
#if defined(__x86_64__)
        // As vectors: the picks are gathers (vgatherqps/vgatherqpd/vpgatherqd), not scalar loads.
        if (__builtin_cpu_supports("avx2"))
          CHECK(codegen::emit_cpu_asm(passes::run_pipeline(g.ir()).program).find("gatherq") != std::string::npos);
#endif
      }
}

// The lanes past the last row read nothing: x ends where an unreadable page starts, so a gather
// lane left unmasked past the rows would fault.
TEST_CASE("a pick of one element per row reads nothing past the last row", "[gather][cpu]") {
  Graph g;
  add_pick_total(g);
  runtime::Executable exe = compile(g);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (int64_t n : {1, 7, 23, 1001}) {
    INFO("n = " << n);
    size_t bytes = static_cast<size_t>(n) * 10 * sizeof(float);
    size_t total = (bytes + page - 1) / page * page + page;
    void* region = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    REQUIRE(region != MAP_FAILED);
    char* guard = static_cast<char*>(region) + total - page;
    REQUIRE(mprotect(guard, page, PROT_NONE) == 0);
    auto* xs = reinterpret_cast<float*>(guard - bytes);  // the last row ends at the guard page
    TensorMap inputs = {{"x", random_values(DType::F32, {n, 10}, 27)}, {"labels", random_indices(DType::I64, {n}, 10, 28)}};
    std::memcpy(xs, inputs.at("x").data(), bytes);
    const int64_t x_shape[] = {n, 10}, labels_shape[] = {n};
    std::vector<runtime::Executable::InputView> views;
    for (const ir::ProgramIO& in : exe.program().inputs)
      views.push_back(in.name == "x" ? runtime::Executable::InputView{DType::F32, x_shape, 2, xs}
                                     : runtime::Executable::InputView{DType::I64, labels_shape, 1, inputs.at("labels").data()});
    std::vector<ir::HostArray> outputs;
    exe.run_views(views, outputs);
    REQUIRE(outputs.size() == 1);
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), {{"total", outputs[0]}}) == "");
    munmap(region, total);
  }
}

// The same picks reduced down the column and along rows of one element: forms that read them
// element by element; their results must not change with the vector form's analysis.
TEST_CASE("a pick of one element per row in column and row-wise reductions", "[gather][cpu][sim]") {
  for (int64_t n : {1, 7, 33, 1000}) {
    INFO("n = " << n);
    Graph g;
    Tensor x = g.input("x", DType::F32, {ir::Dim::symbol("N"), 10});
    Tensor labels = g.input("labels", DType::I32, {ir::Dim::symbol("N")});
    Tensor picked = take_along_axis(x, expand_dims(labels, 1), 1);  // [N, 1]
    g.output("columns", sum(picked, 0));
    g.output("rows", picked - max(picked, 1, true) + sum(exp(picked), 1, true));
    check_cpu(g, {{"x", random_values(DType::F32, {n, 10}, 25)}, {"labels", random_indices(DType::I32, {n}, 10, 26)}});
  }
}

TEST_CASE("a bad label in a pick of one element per row is the interpreter's error", "[gather][errors]") {
  Graph g;
  add_pick_total(g);
  runtime::Executable exe = compile(g);
  for (int64_t n : {1, 9, 100})
    for (int64_t bad : {int64_t{10}, int64_t{-11}, int64_t{1} << 40}) {
      INFO("n = " << n << ", bad label " << bad << " in the last row");
      TensorMap inputs = {{"x", random_values(DType::F32, {n, 10}, 23)}, {"labels", random_indices(DType::I64, {n}, 10, 24)}};
      inputs["labels"].set_i64(n - 1, bad);
      std::string want = "take_along_axis: index " + std::to_string(bad) + " is out of range for axis 1 of size 10";
      CHECK_THROWS_WITH(ir::interpret(g.ir(), inputs), Catch::EndsWith(want));
      CHECK_THROWS_WITH(exe.run(inputs), Catch::EndsWith(want));
      inputs["labels"].set_i64(n - 1, -10);
      CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe.run(inputs)) == "");
    }
}

TEST_CASE("takes beside a reduction's or matmul's result, in its epilogue", "[gather][cpu][sim]") {
  for (int64_t n : {1, 7, 129}) {
    INFO("n = " << n);
    Graph g;
    Tensor x = g.input("x", DType::F64, {6, 5});
    Tensor i = g.input("i", DType::I64, {n});
    Tensor z = g.input("z", DType::F64, {n, 3});
    Tensor a = g.input("a", DType::F64, {n, 4});
    Tensor b = g.input("b", DType::F64, {4, 5});
    g.output("plus_row_sums", take(x, i, 0) + sum(z, 1, true));
    g.output("plus_product", take(x, i, 0) * matmul(a, b));
    check_cpu(g, {{"x", random_values(DType::F64, {6, 5}, 21)},
                  {"i", random_indices(DType::I64, {n}, 6, 22)},
                  {"z", random_values(DType::F64, {n, 3}, 23)},
                  {"a", random_values(DType::F64, {n, 4}, 24)},
                  {"b", random_values(DType::F64, {4, 5}, 25)}});
  }
}

TEST_CASE("symbolic sizes: one compiled program serves every size", "[gather][cpu][sim]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {ir::Dim::symbol("N"), ir::Dim::symbol("D")});
  Tensor i = g.input("i", DType::I64, {ir::Dim::symbol("M")});
  g.output("y", exp(take(x * 0.5f, i, 0)) + 1.0f);
  runtime::Executable exe = compile(g);
  for (int64_t n : {1, 7, 1023}) {
    INFO("n = " << n);
    TensorMap inputs = {{"x", random_values(DType::F32, {n, 3}, 7)}, {"i", random_indices(DType::I64, {n + 4}, n, 8)}};
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe.run(inputs)) == "");
  }
}

TEST_CASE("an elementwise chain around a take is one kernel; a take fuses into a reduction", "[gather][fusion]") {
  Tensor x, i;
  SECTION("elementwise chain") {
    Graph g;
    x = g.input("x", DType::F32, {ir::Dim::symbol("N")});
    i = g.input("i", DType::I64, {ir::Dim::symbol("M")});
    g.output("y", exp(take(x * 2.0f, i)) + 1.0f);
    CHECK(kernel_count(g) == 1);
  }
  SECTION("take_along_axis in a chain") {
    Graph g;
    x = g.input("x", DType::F32, {4, 5});
    i = g.input("i", DType::I32, {4, 3});
    g.output("y", sqrt(abs(take_along_axis(x - 1.0f, i, 1))) * 3.0f);
    CHECK(kernel_count(g) == 1);
  }
  SECTION("a take feeding a reduction") {
    Graph g;
    x = g.input("x", DType::F32, {ir::Dim::symbol("V"), 8});
    i = g.input("i", DType::I64, {ir::Dim::symbol("T")});
    g.output("y", mean(take(x, i, 0) * 2.0f, 0));
    passes::PipelineResult r = passes::run_pipeline(g.ir());
    REQUIRE(r.program.kernels.size() == 1);
    CHECK(r.program.kernels[0].kind == ir::KernelKind::Reduction);
  }
  SECTION("a reduction read by a take is stored first, and says why") {
    Graph g;
    x = g.input("x", DType::F32, {6, 8});
    i = g.input("i", DType::I64, {3});
    g.output("y", take(sum(x, 1), i) + 1.0f);
    passes::PipelineResult r = passes::run_pipeline(g.ir());
    CHECK(r.program.kernels.size() == 2);
    std::string why = passes::explain_fusion(g.ir(), r.partition);
    CHECK_THAT(why, Catch::Contains("is read by a take at data-dependent positions: computed once and stored"));
  }
  SECTION("a slice of a take stores the take (every index is checked)") {
    Graph g;
    x = g.input("x", DType::F32, {6});
    i = g.input("i", DType::I64, {5});
    g.output("y", index(take(x, i), {slice(1, 3)}) + 1.0f);
    CHECK(kernel_count(g) == 2);
  }
}

TEST_CASE("a bad index in a compiled kernel is the interpreter's error, outputs untouched", "[gather][errors]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {ir::Dim::symbol("N")});
  Tensor i = g.input("i", DType::I32, {ir::Dim::symbol("M")});
  Tensor j = g.input("j", DType::I64, {2, ir::Dim::symbol("M")});
  Tensor x2 = g.input("x2", DType::F32, {2, ir::Dim::symbol("N")});
  g.output("y", exp(x));
  int line = __LINE__ + 1;
  g.output("t", take(x * 2.0f, i) + 1.0f);
  g.output("a", sum(take_along_axis(x2, j, 1)));
  runtime::Executable exe = compile(g);
  ir::HostArray xs(DType::F32, {5}), is(DType::I32, {3}), js(DType::I64, {2, 3}), x2s(DType::F32, {2, 5});
  for (int64_t bad : {5, -6, 1000000}) {
    INFO("bad index " << bad);
    is.set_i64(2, bad);
    std::string want = "test_gather.cpp:" + std::to_string(line) + ": error: take: index " + std::to_string(bad) +
                       " is out of range for axis 0 of size 5";
    TensorMap inputs = {{"x", xs}, {"i", is}, {"j", js}, {"x2", x2s}};
    CHECK_THROWS_WITH(ir::interpret(g.ir(), inputs), Catch::EndsWith(want));
    TensorMap outputs;
    for (const char* name : {"y", "t"}) {
      outputs[name] = ir::HostArray(DType::F32, {name[0] == 'y' ? 5 : 3});
      outputs[name].set_f64(0, 42.0);
    }
    CHECK_THROWS_WITH(exe.run(inputs, outputs), Catch::EndsWith(want));
    CHECK(outputs.size() == 2);
    CHECK(outputs.at("y").get_f64(0) == 42.0);
    CHECK(outputs.at("t").get_f64(0) == 42.0);
    std::vector<ir::HostArray> views(3, ir::HostArray(DType::F32, {1}));
    views[0].set_f64(0, 42.0);
    std::vector<runtime::Executable::InputView> in_views;
    for (const ir::ProgramIO& in : exe.program().inputs) {
      const ir::HostArray& a = inputs.at(in.name);
      in_views.push_back({a.dtype, a.shape.data(), a.rank(), a.data()});
    }
    CHECK_THROWS_WITH(exe.run_views(in_views, views), Catch::EndsWith(want));
    CHECK(views[0].get_f64(0) == 42.0);
  }
  SECTION("take_along_axis, and a good run afterwards") {
    is.set_i64(2, -5);
    js.set_i64(4, 7);
    TensorMap inputs = {{"x", xs}, {"i", is}, {"j", js}, {"x2", x2s}};
    std::string want = "take_along_axis: index 7 is out of range for axis 1 of size 5";
    CHECK_THROWS_WITH(ir::interpret(g.ir(), inputs), Catch::EndsWith(want));
    CHECK_THROWS_WITH(exe.run(inputs), Catch::EndsWith(want));
    inputs["j"].set_i64(4, -1);
    CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), inputs), exe.run(inputs)) == "");
  }
}

TEST_CASE("the error record's checks are numbered program-wide", "[gather][ir]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {6, 8});
  Tensor i = g.input("i", DType::I64, {3});
  Tensor k = g.input("k", DType::I32, {6, 2});
  g.output("y", take(sum(x, 1), i) + 1.0f);
  g.output("z", take_along_axis(x, k, 1));
  ir::Program p = passes::run_pipeline(g.ir()).program;
  std::vector<ir::IndexCheck> checks = ir::index_checks(p);
  REQUIRE(checks.size() == 2);
  int before = 0;
  for (const ir::IndexCheck& c : checks) {
    CHECK(ir::first_index_check(p, c.kernel) <= before);
    ++before;
    CHECK(ir::has_index_check(p.kernels[c.kernel].body.node(c.node).kind));
  }
  ir::SymbolBindings none;
  CHECK(std::string(ir::index_check_error(checks, 1, -9, none).what()).find("index -9 is out of range") != std::string::npos);
}

TEST_CASE("a bad index on the CUDA simulator: the same error, device outputs untouched", "[gather][errors][sim]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {ir::Dim::symbol("N")});
  Tensor i = g.input("i", DType::I64, {ir::Dim::symbol("M")});
  g.output("y", exp(x));
  int line = __LINE__ + 1;
  g.output("t", sum(take(x, i) * 2.0f));  // a two-stage reduction with a take in its prologue
  std::unique_ptr<runtime::CudaExecutable> exe = compile_cuda(g, Target::cuda_sim());
  ir::HostArray xs = random_values(DType::F32, {5}, 1), is = random_indices(DType::I64, {1023}, 5, 2);
  is.set_i64(700, -6);
  std::string want = "test_gather.cpp:" + std::to_string(line) + ": error: take: index -6 is out of range for axis 0 of size 5";
  CHECK_THROWS_WITH(ir::interpret(g.ir(), {{"x", xs}, {"i", is}}), Catch::EndsWith(want));
  runtime::DeviceTensorMap inputs, outputs;
  inputs.emplace("x", runtime::DeviceBuffer::to_device(xs));
  inputs.emplace("i", runtime::DeviceBuffer::to_device(is));
  ir::HostArray y0(DType::F32, {5}), t0(DType::F32, {});
  y0.set_f64(0, 42.0);
  t0.set_f64(0, 43.0);
  outputs.emplace("y", runtime::DeviceBuffer::to_device(y0));
  outputs.emplace("t", runtime::DeviceBuffer::to_device(t0));
  CHECK_THROWS_WITH(exe->run(inputs, outputs), Catch::EndsWith(want));
  CHECK(outputs.at("y").to_host().get_f64(0) == 42.0);
  CHECK(outputs.at("t").to_host().get_f64(0) == 43.0);
  is.set_i64(700, -5);  // the record is cleared for the next run
  inputs.erase("i");
  inputs.emplace("i", runtime::DeviceBuffer::to_device(is));
  exe->run(inputs, outputs);
  CHECK(testing::compare_outputs(ir::interpret_with_bounds(g.ir(), {{"x", xs}, {"i", is}}),
                                 {{"y", outputs.at("y").to_host()}, {"t", outputs.at("t").to_host()}}) == "");
}

TEST_CASE("take kernels assemble with ptxas, and bundles carry the index checks", "[gather][cuda][ptxas]") {
  Graph g;
  Tensor x = g.input("x", DType::F64, {ir::Dim::symbol("N"), 4});
  Tensor i = g.input("i", DType::I32, {ir::Dim::symbol("M")});
  Tensor j = g.input("j", DType::I64, {ir::Dim::symbol("N"), 2});
  g.output("rows", take(x, i, 0) + 1.0);
  g.output("along", max(take_along_axis(x, j, 1), 1));
  g.output("softmax_of_rows", exp(take(x, i, 0)) / sum(exp(take(x, i, 0)), 1, true));
  Tensor a = g.input("a", DType::F64, {ir::Dim::symbol("M"), 3});
  Tensor b = g.input("b", DType::F64, {3, 4});
  g.output("epilogue", take(x, i, 0) * matmul(a, b));
  for (int sm : {80, 90}) {
    // codegen directly: compile_cuda_program gives simulator images once this process has
    // selected the simulator (the tests above).
    passes::PipelineOptions options;
    options.target = ir::Target::cuda(0, sm);
    ir::Program program = passes::run_pipeline(g.ir(), options).program;
    codegen::CudaOptions cuda;
    cuda.sm = sm;
    codegen::CudaModule m = codegen::compile_cuda(program, cuda);
    runtime::CudaProgram p = runtime::make_cuda_program(program, m.plan, m.ptx);
    INFO("sm_" << sm);
    CHECK(testing::ptxas_errors(p.ptx, "sm_" + std::to_string(sm)) == "");
    REQUIRE(p.plan.error_scratch >= 0);
    CHECK(!p.index_checks.empty());
    runtime::CudaProgram back = runtime::parse_bundle(
        [&](const std::string& name) -> std::optional<std::string> {
          if (name == "plan.json") return runtime::bundle_plan_json(p);
          if (name == "kernels.ptx") return p.ptx;
          return std::nullopt;
        },
        "memory");
    CHECK(back.plan.error_scratch == p.plan.error_scratch);
    CHECK(back.index_checks == p.index_checks);
  }
}

TEST_CASE("embedding and cross_entropy: the take fuses into its consumer's kernel", "[gather][fusion][examples]") {
  // embedding: mean(take(table, tokens)) was 2 kernels (the take on its own), now 1;
  // cross_entropy: 5 kernels before (take_along_axis and its expand_dims apart), then 3 (the
  // take_along_axis of the input logits in the final mean's prologue), now 2 (the rows' max
  // computed with their sum of exps and stored for the mean's kernel).
  const std::pair<const char*, size_t> expected[] = {{"embedding.expr", 1}, {"cross_entropy.expr", 2}};
  for (const auto& [file, kernels] : expected) {
    INFO(file);
    ir::Graph g = testing::compile_example(std::filesystem::path(FUSE_SOURCE_DIR) / "examples" / file);
    passes::PipelineResult r = passes::run_pipeline(g);
    CHECK(r.program.kernels.size() == kernels);
    bool fused_take = false;
    for (const ir::Kernel& k : r.program.kernels) {
      bool has_take = false, has_other = false;
      for (const ir::Node& n : k.body.nodes) {
        has_take = has_take || n.kind == ir::OpKind::Take || n.kind == ir::OpKind::TakeAlongAxis;
        has_other = has_other || n.kind == ir::OpKind::Reduce || n.kind == ir::OpKind::Elementwise;
      }
      fused_take = fused_take || (has_take && has_other);
    }
    CHECK(fused_take);
    // --explain-fusion and --emit=dot --fused show the take inside its consumer's kernel.
    CHECK_THAT(passes::explain_fusion(g, r.partition), Catch::Contains(": an indexed load here"));
    std::string dot = ir::program_to_dot(r.program);
    size_t cluster = dot.find("subgraph cluster_k" + std::to_string(kernels - 1));
    CHECK(cluster != std::string::npos);
    CHECK(dot.find("take", cluster) != std::string::npos);
  }
}

// np-random, seed 170285: a take by a computed index beside a row reduction, in its epilogue
// `r * r + take(x1, i)`, gave `take * r + take` on the CUDA simulator. MLIR 19's block merging
// (in convert-gpu-to-nvvm's greedy rewrite) mis-merged the epilogue of the on-chip and the
// by-loops branches, one op using one value twice; codegen/cuda/lower.cpp now lowers SCF to
// branches after that pass and canonicalizes without block merging.
TEST_CASE("a take by a computed index in a row reduction's epilogue that uses the reduction twice", "[gather][cpu][sim]") {
  using ir::ScalarBuilder;
  using ir::ScalarId;
  using ir::ScalarOp;
  for (ir::ReduceKind kind : {ir::ReduceKind::Max, ir::ReduceKind::Sum, ir::ReduceKind::Min}) {
    for (bool square_both : {false, true}) {
      for (int64_t m : {2, 7}) {
        INFO(ir::reduce_kind_name(kind) << ", both squared " << square_both << ", M = " << m);
        ir::Graph g;
        ir::Dim sym = ir::Dim::symbol("M");
        ir::NodeId x0 = ir::add_input(g, "x0", DType::F32, {sym, sym});
        ir::NodeId r = ir::add_reduce(g, x0, kind, {1}, true);
        ir::NodeId x1 = ir::add_input(g, "x1", DType::F32, {6, 1});
        ScalarBuilder clip;
        ScalarId p = clip.param(DType::I64);
        ScalarId i = clip.cast(clip.binary(ScalarOp::Minimum, clip.binary(ScalarOp::Maximum, p, clip.literal_int(-6)),
                                           clip.literal_int(5)), DType::I32);
        ir::NodeId idx = ir::add_elementwise(g, {ir::add_arange(g, sym)}, clip.finish({i}));
        ir::NodeId t = ir::add_take(g, x1, idx, 0);
        ScalarBuilder body;
        ScalarId p0 = body.param(DType::F32), p1 = body.param(DType::F32);
        ScalarId rr = body.binary(ScalarOp::Mul, p0, p0);
        ScalarId y = body.binary(ScalarOp::Add, rr, square_both ? body.binary(ScalarOp::Mul, p1, p1) : p1);
        ir::add_output(g, "y", ir::add_elementwise(g, {r, t}, body.finish({y})));
        TensorMap inputs = {{"x0", random_values(DType::F32, {m, m}, 31)}, {"x1", random_values(DType::F32, {6, 1}, 32)}};
        ir::ValuesAndBounds expected = ir::interpret_with_bounds(g, inputs);
        CHECK(testing::compare_outputs(expected, compile(g).run(inputs)) == "");
        CHECK(testing::compare_outputs(expected, compile_cuda(g, Target::cuda_sim())->run_host(inputs)) == "");
      }
    }
  }
}
