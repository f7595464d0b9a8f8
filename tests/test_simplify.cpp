// The simplify pass: CSE, constant folding, algebraic identities (and the IEEE cases they must
// leave alone), view folding and DCE, each checked against the interpreter on random inputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "frontends/api.h"
#include "ir/interpreter.h"
#include "ir/printer.h"
#include "ir/verifier.h"
#include "passes/broadcast.h"
#include "passes/pipeline.h"
#include "passes/simplify.h"
#include "random_graph.h"

using namespace fuse;
using ir::OpKind;

namespace {

const double kNaN = std::numeric_limits<double>::quiet_NaN();
const double kInf = std::numeric_limits<double>::infinity();

// Random values for every input of g, each symbol bound to 5. Floats include the values IEEE
// identities trip over: -0.0, +0.0, NaN and both infinities.
ir::TensorMap random_inputs(const ir::Graph& g, uint32_t seed) {
  std::mt19937 rng(seed);
  const double special[] = {-0.0, 0.0, kNaN, kInf, -kInf, 1.0, -1.0};
  ir::TensorMap inputs;
  for (ir::NodeId id : g.input_nodes()) {
    const ir::Node& n = g.node(id);
    ir::SymbolBindings symbols;
    for (const Dim& d : n.shape)
      for (const std::string& s : d.symbol_names()) symbols[s] = 5;
    ir::HostArray a(n.dtype, ir::evaluate(n.shape, symbols));
    for (int64_t i = 0; i < a.size(); ++i) {
      if (n.dtype == DType::Bool) a.set_i64(i, rng() % 2);
      else if (ir::is_integer(n.dtype)) a.set_i64(i, static_cast<int64_t>(rng() % 21) - 10);
      else if (rng() % 3 == 0) a.set_f64(i, special[rng() % std::size(special)]);
      else a.set_f64(i, std::uniform_real_distribution<double>(-3.0, 3.0)(rng));
    }
    inputs[n.as<ir::InputAttrs>().name] = std::move(a);
  }
  return inputs;
}

// Bitwise equal elements (so -0.0 differs from +0.0), any NaN equal to any NaN.
void check_same(const ir::HostArray& got, const ir::HostArray& want) {
  REQUIRE(got.dtype == want.dtype);
  REQUIRE(got.shape == want.shape);
  size_t width = ir::dtype_size(want.dtype);
  for (int64_t i = 0; i < want.size(); ++i) {
    bool both_nan = ir::is_float(want.dtype) && std::isnan(got.get_f64(i)) && std::isnan(want.get_f64(i));
    if (!both_nan && std::memcmp(&got.bytes[i * width], &want.bytes[i * width], width) != 0) {
      INFO("element " << i << ": got " << got.get_f64(i) << ", want " << want.get_f64(i));
      REQUIRE(false);
    }
  }
}

void check_same_results(const ir::Graph& before, const ir::Graph& after) {
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    ir::TensorMap inputs = random_inputs(before, seed);
    ir::TensorMap want = ir::interpret(before, inputs), got = ir::interpret(after, inputs);
    REQUIRE(got.size() == want.size());
    for (const auto& [name, value] : want) {
      INFO("output " << name);
      check_same(got.at(name), value);
    }
  }
}

// Broadcast then simplify g, checking the verifier and, unless fast_math is on (it may change
// special values), the interpreter's results before and after.
ir::Graph simplified(const Graph& g, passes::SimplifyOptions options = {}) {
  ir::Graph after = passes::simplify(passes::make_broadcasts_explicit(g.ir()), options);
  INFO(ir::print_graph(after));
  CHECK(ir::verify(after, {.explicit_broadcasts = true}).empty());
  if (!options.fast_math) check_same_results(g.ir(), after);
  return after;
}

int count(const ir::Graph& g, OpKind kind) {
  int n = 0;
  for (const ir::Node& node : g.nodes) n += node.kind == kind;
  return n;
}

const ir::Node& output(const ir::Graph& g, size_t i = 0) { return g.node(g.outputs.at(i).node); }
std::string body(const ir::Node& n) { return ir::to_string(n.as<ir::ElementwiseAttrs>().body); }

}  // namespace

TEST_CASE("CSE merges duplicated subgraphs but never inputs", "[simplify][cse]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  Tensor y = g.input("y", DType::F32, {sym("N")});
  g.output("a", exp(x) + exp(x));
  g.output("b", exp(y) * 2.0);
  g.output("c", exp(y) * 2.0);
  ir::Graph s = simplified(g);
  CHECK(s.nodes.size() == 6);  // x, y, exp(x), add, exp(y), mul
  CHECK(count(s, OpKind::Input) == 2);
  CHECK(output(s, 0).inputs[0] == output(s, 0).inputs[1]);
  CHECK(s.outputs[1].node == s.outputs[2].node);  // two outputs, one node
  CHECK(s.outputs[2].name == "c");
}

TEST_CASE("rand nodes with the same seed and shape are one node", "[simplify][cse]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {8});
  g.output("y", x * g.rand({8}, 7) + g.rand({8}, 7) + g.rand({8}, 8));
  ir::Graph s = simplified(g);
  CHECK(count(s, OpKind::Rand) == 2);
}

TEST_CASE("constant-only subgraphs fold into one constant", "[simplify][fold]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {3});
  Tensor a = g.constant(HostArray::from<float>({3}, {1, 2, 3}));
  Tensor b = g.constant(HostArray::from<float>({3}, {4, 5, 6}));
  g.output("y", x + sqrt(a * b + 1.0));
  ir::Graph s = simplified(g);
  CHECK(s.nodes.size() == 3);
  REQUIRE(count(s, OpKind::Constant) == 1);
  const ir::Node& c = s.nodes[1];
  CHECK(c.as<ir::ConstantAttrs>().value.to_doubles() ==
        std::vector<double>{std::sqrt(5.0f), std::sqrt(11.0f), std::sqrt(19.0f)});
  CHECK(c.loc.line != 0);  // the folded constant keeps the location of the node it replaces
}

TEST_CASE("large constants are not folded, views of small ones are", "[simplify][fold]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {4096});
  Tensor big = g.constant(HostArray::from<float>({4096}, std::vector<float>(4096, 0.5f)));
  std::vector<float> ramp(4096);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i);
  Tensor varied = g.constant(HostArray::from<float>({4096}, ramp));
  Tensor scalar = g.constant(HostArray::scalar(3.0f));
  g.output("y", x + exp(varied));
  g.output("z", broadcast_to(scalar, {2, 2}));
  g.output("w", big * x);
  ir::Graph s = simplified(g);
  CHECK(output(s, 0).inputs.size() == 2);
  CHECK(count(s, OpKind::Elementwise) == 3);  // exp(varied) stays: its result is too large
  CHECK(output(s, 1).kind == OpKind::Constant);
  CHECK(output(s, 1).shape == Shape{2, 2});
  // A splat constant, however large, becomes a literal of the body.
  CHECK(output(s, 2).inputs.size() == 1);
  CHECK(body(output(s, 2)) == "(p0: f32) -> mul(0.5:f32, p0)");
}

TEST_CASE("scalar constants become literals of the body", "[simplify][fold]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  Tensor c = g.constant(HostArray::scalar(2.5f));
  Tensor i = g.input("i", DType::I32, {sym("N")});
  Tensor k = g.constant(HostArray::from<int32_t>({1}, {3}));
  g.output("y", x * c);
  g.output("z", i - k);
  ir::Graph s = simplified(g);
  CHECK(count(s, OpKind::Constant) == 0);
  CHECK(count(s, OpKind::BroadcastTo) == 0);
  CHECK(body(output(s, 0)) == "(p0: f32) -> mul(p0, 2.5:f32)");
  CHECK(body(output(s, 1)) == "(p0: i32) -> sub(p0, 3:i32)");
  // Before the broadcasting pass, a constant that decides the result's shape stays an operand.
  Graph h;
  Tensor v = h.input("v", DType::F32, {});
  h.output("y", v * h.constant(HostArray::from<float>({3}, {2, 2, 2})));
  ir::Graph implicit = passes::simplify(h.ir());
  CHECK(output(implicit).inputs.size() == 2);
  check_same_results(h.ir(), implicit);
}

TEST_CASE("multiplying by one and other exact identities disappear", "[simplify][identity]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  Tensor d = g.input("d", DType::F64, {sym("N")});
  g.output("mul1", x * 1.0);
  g.output("div1", x / 1.0);
  g.output("sub0", x - 0.0);
  g.output("addm0", x + (-0.0));
  g.output("negneg", map([](Scalar a) { return -(-a); }, x));
  g.output("pow1", pow(x, 1.0));
  g.output("pow2", pow(x, 2.0));
  g.output("pow2d", pow(d, 2.0));
  ir::Graph s = simplified(g);
  for (size_t i = 0; i < 6; ++i) {
    INFO(s.outputs[i].name);
    CHECK(s.outputs[i].node == 0);
  }
  CHECK(body(output(s, 6)) == "(p0: f32) -> mul(p0, p0)");
  // glibc's f64 pow(x, 2) is not always the correctly rounded x * x: only with fast_math.
  CHECK(body(output(s, 7)) == "(p0: f64) -> pow(p0, 2.0:f64)");
  CHECK(s.nodes.size() == 4);
  CHECK(body(output(simplified(g, {.fast_math = true}), 7)) == "(p0: f64) -> mul(p0, p0)");
}

TEST_CASE("x + 0.0 stays for floats, goes for integers and with fast_math", "[simplify][identity][ieee]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  Tensor i = g.input("i", DType::I32, {sym("N")});
  Tensor j = g.input("j", DType::I32, {sym("N")});
  g.output("f", x + 0.0);
  g.output("fm", x * 0.0);
  g.output("fs", x - (-0.0));
  g.output("i", i + 0);
  g.output("im", i * 0 + j);
  g.output("zip", zip([](Scalar a, Scalar b) { return a * 0 + b; }, i, j));
  ir::Graph s = simplified(g);
  CHECK(body(output(s, 0)) == "(p0: f32) -> add(p0, 0.0:f32)");
  CHECK(body(output(s, 1)) == "(p0: f32) -> mul(p0, 0.0:f32)");
  CHECK(output(s, 2).kind == OpKind::Elementwise);
  CHECK(s.outputs[3].node == 1);  // i
  CHECK(s.outputs[4].node == 2);  // j
  CHECK(s.outputs[5].node == 2);

  ir::Graph fast = simplified(g, {.fast_math = true});
  CHECK(fast.outputs[0].node == 0);
  CHECK(fast.outputs[2].node == 0);
  CHECK(body(output(fast, 1)) == "(p0: f32) -> 0.0:f32");
}

TEST_CASE("NaN and -0.0 keep their IEEE results", "[simplify][ieee]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {4});
  g.output("add0", x + 0.0);
  g.output("mul0", x * 0.0);
  g.output("mul1", (x + 0.0) * 1.0);
  ir::Graph s = simplified(g);
  ir::TensorMap inputs = {{"x", HostArray::from<float>({4}, {-0.0f, NAN, INFINITY, -2.0f})}};
  ir::TensorMap out = ir::interpret(s, inputs);
  const float* add0 = out.at("add0").as<float>();
  CHECK(add0[0] == 0.0f);
  CHECK_FALSE(std::signbit(add0[0]));  // -0.0 + 0.0 is +0.0
  CHECK(std::isnan(add0[1]));
  const float* mul0 = out.at("mul0").as<float>();
  CHECK(std::isnan(mul0[1]));
  CHECK(std::isnan(mul0[2]));  // inf * 0 is NaN
  CHECK(std::signbit(mul0[3]));  // -2 * 0 is -0.0
  CHECK_FALSE(std::signbit(out.at("mul1").as<float>()[0]));
  CHECK(s.outputs[2].node == s.outputs[0].node);  // (x + 0.0) * 1.0 is x + 0.0
}

TEST_CASE("transpose of transpose disappears, permutes compose", "[simplify][views]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {2, 3, 4});
  g.output("tt", transpose(transpose(x)));
  g.output("pp", permute(permute(x, {1, 2, 0}), {1, 2, 0}));
  g.output("id", permute(x, {0, 1, 2}));
  ir::Graph s = simplified(g);
  CHECK(s.outputs[0].node == 0);
  CHECK(s.outputs[2].node == 0);
  REQUIRE(output(s, 1).kind == OpKind::Permute);
  CHECK(output(s, 1).as<ir::PermuteAttrs>().perm == std::vector<int>{2, 0, 1});
  CHECK(output(s, 1).inputs[0] == 0);
  CHECK(s.nodes.size() == 2);
}

TEST_CASE("reshape, broadcast and expand_dims chains fold", "[simplify][views]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {3, 4});
  Tensor v = g.input("v", DType::F32, {4});
  g.output("rr", reshape(reshape(x, {2, 6}), {4, 3}));
  g.output("back", reshape(reshape(expand_dims(x, 0), {12}), {3, 4}));
  g.output("same", reshape(x, {3, 4}));
  g.output("es", squeeze(expand_dims(x, 1), 1));
  g.output("bb", broadcast_to(broadcast_to(v, {3, 4}), {2, 3, 4}));
  g.output("bsame", broadcast_to(v, {4}));
  ir::Graph s = simplified(g);
  REQUIRE(output(s, 0).kind == OpKind::Reshape);
  CHECK(output(s, 0).inputs[0] == 0);
  CHECK(s.outputs[1].node == 0);
  CHECK(s.outputs[2].node == 0);
  CHECK(s.outputs[3].node == 0);
  REQUIRE(output(s, 4).kind == OpKind::BroadcastTo);
  CHECK(output(s, 4).inputs[0] == 1);
  CHECK(s.outputs[5].node == 1);
  CHECK(s.nodes.size() == 4);
}

TEST_CASE("dead nodes go, unused inputs stay", "[simplify][dce]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N")});
  Tensor unused = g.input("unused", DType::I64, {3});
  (void)exp(x);
  (void)(unused + 1);
  g.output("y", sin(x));
  ir::Graph s = simplified(g);
  REQUIRE(s.nodes.size() == 3);
  CHECK(s.nodes[0].kind == OpKind::Input);
  CHECK(s.nodes[1].as<ir::InputAttrs>().name == "unused");
  CHECK(s.nodes[2].inputs == std::vector<ir::NodeId>{0});
}

TEST_CASE("simplify runs in the pipeline after broadcast", "[simplify][pipeline]") {
  const std::vector<std::string>& names = passes::pipeline_pass_names();
  REQUIRE(names.size() >= 2);
  CHECK(names[0] == "broadcast");
  CHECK(names[1] == "simplify");
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), 4});
  Tensor m = g.input("m", DType::F32, {4});
  g.output("y", exp(x - m) / sum(exp(x - m), 1, true));
  std::vector<std::string> ran;
  auto record = [&](const std::string& name, const ir::Graph&) { ran.push_back(name); };
  passes::PipelineOptions options;
  options.after_pass = record;
  ir::Graph s = passes::run_pipeline(g.ir(), options).graph;
  REQUIRE(ran.size() >= 2);
  CHECK(std::vector<std::string>(ran.begin(), ran.begin() + 2) == std::vector<std::string>(names.begin(), names.begin() + 2));
  CHECK(count(s, OpKind::Elementwise) == 3);  // x - m and exp are shared, then the division
  check_same_results(g.ir(), s);
}

TEST_CASE("simplify keeps every result bit on random graphs", "[simplify][random]") {
  for (uint64_t seed = 1; seed <= 1000; ++seed) {
    testing::RandomCase c = testing::random_case(seed);
    INFO(c.description);
    ir::Graph after = passes::simplify(passes::make_broadcasts_explicit(c.graph));
    REQUIRE(ir::verify(after, {.explicit_broadcasts = true}).empty());
    ir::TensorMap want = ir::interpret(c.graph, c.inputs, c.symbols);
    ir::TensorMap got = ir::interpret(after, c.inputs, c.symbols);
    for (const auto& [name, value] : want) {
      INFO("output " << name);
      check_same(got.at(name), value);
    }
  }
}
