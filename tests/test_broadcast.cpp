// NumPy broadcasting rules (including symbolic dims) and the pass that makes broadcasts explicit.
#include <catch2/catch.hpp>

#include "frontends/api.h"
#include "ir/verifier.h"
#include "passes/broadcast.h"

using namespace fuse;
using ir::Shape;

static Shape S(std::initializer_list<Dim> dims) { return Shape(dims); }

TEST_CASE("broadcast_shapes follows NumPy's examples", "[broadcast]") {
  struct Case { Shape a, b, expected; };
  // From NumPy's broadcasting documentation.
  const Case ok[] = {
      {S({256, 256, 3}), S({3}), S({256, 256, 3})},
      {S({8, 1, 6, 1}), S({7, 1, 5}), S({8, 7, 6, 5})},
      {S({5, 4}), S({1}), S({5, 4})},
      {S({5, 4}), S({4}), S({5, 4})},
      {S({15, 3, 5}), S({15, 1, 5}), S({15, 3, 5})},
      {S({15, 3, 5}), S({3, 5}), S({15, 3, 5})},
      {S({15, 3, 5}), S({3, 1}), S({15, 3, 5})},
      {S({}), S({2, 3}), S({2, 3})},
      {S({0}), S({1}), S({0})},
      {S({sym("N")}), S({sym("N")}), S({sym("N")})},
      {S({sym("N"), 1}), S({1, sym("M")}), S({sym("N"), sym("M")})},
      {S({sym("N"), 4}), S({4}), S({sym("N"), 4})},
  };
  for (const Case& c : ok) {
    CHECK(ir::broadcast_shapes({c.a, c.b}, "add", {}) == c.expected);
    CHECK(ir::broadcast_shapes({c.b, c.a}, "add", {}) == c.expected);
  }
}

TEST_CASE("incompatible shapes fail with a message naming the op and both shapes", "[broadcast]") {
  struct Case { Shape a, b; std::string message; };
  const Case bad[] = {
      {S({3}), S({4}), "add: shapes [3] and [4] cannot be broadcast together (dim 3 vs 4)"},
      {S({2, 1}), S({8, 4, 3}), "add: shapes [2, 1] and [8, 4, 3] cannot be broadcast together (dim 2 vs 4)"},
      {S({sym("N")}), S({sym("M")}), "add: shapes [N] and [M] cannot be broadcast together (dim N vs M)"},
      {S({sym("N")}), S({4}), "add: shapes [N] and [4] cannot be broadcast together (dim N vs 4)"},
      {S({0}), S({2}), "add: shapes [0] and [2] cannot be broadcast together (dim 0 vs 2)"},
  };
  for (const Case& c : bad) CHECK_THROWS_WITH(ir::broadcast_shapes({c.a, c.b}, "add", {}), "error: " + c.message);
}

TEST_CASE("API shape errors name the op, both shapes and the caller's line", "[broadcast][api]") {
  Graph g;
  Tensor a = g.input("a", DType::F32, {3});
  Tensor b = g.input("b", DType::F32, {4});
  int line = __LINE__ + 2;
  try {
    (void)(a + b);
    FAIL("expected a shape error");
  } catch (const Error& e) {
    std::string what = e.what();
    CHECK_THAT(what, Catch::Contains("test_broadcast.cpp:" + std::to_string(line)));
    CHECK_THAT(what, Catch::Contains("add: shapes [3] and [4]"));
  }
}

TEST_CASE("the pass inserts explicit broadcast views", "[broadcast]") {
  Graph g;
  Tensor x = g.input("x", DType::F32, {sym("N"), 4});
  Tensor b = g.input("b", DType::F32, {4});
  Tensor s = g.input("s", DType::F32);
  g.output("y", x * s + b);
  CHECK_FALSE(ir::verify(g.ir(), {.explicit_broadcasts = true}).empty());

  ir::Graph out = passes::make_broadcasts_explicit(g.ir());
  CHECK(ir::verify(out, {.explicit_broadcasts = true}).empty());
  int broadcasts = 0;
  for (const ir::Node& n : out.nodes)
    if (n.kind == ir::OpKind::BroadcastTo) {
      ++broadcasts;
      CHECK(n.shape == S({sym("N"), 4}));
    }
  CHECK(broadcasts == 2);
}

TEST_CASE("matmul is canonicalized: vectors, batch broadcast, dtypes", "[broadcast][matmul]") {
  Graph g;
  Tensor a = g.input("a", DType::F32, {2, 1, 3, 4});
  Tensor b = g.input("b", DType::I32, {5, 4, 6});
  Tensor v = g.input("v", DType::F32, {4});
  Tensor m = matmul(a, b);
  CHECK(m.shape() == S({2, 5, 3, 6}));
  CHECK(m.dtype() == DType::F32);
  Tensor mv = matmul(a, v);
  CHECK(mv.shape() == S({2, 1, 3}));
  Tensor vv = matmul(v, v);
  CHECK(vv.shape() == S({}));
  g.output("m", m);
  g.output("mv", mv);
  g.output("vv", vv);

  ir::Graph out = passes::make_broadcasts_explicit(g.ir());
  REQUIRE(ir::verify(out, {.explicit_broadcasts = true}).empty());
  for (size_t i = 0; i < out.outputs.size(); ++i)
    CHECK(out.node(out.outputs[i].node).shape == g.ir().node(g.ir().outputs[i].node).shape);
}

TEST_CASE("matmul shape errors", "[broadcast][matmul]") {
  Graph g;
  Tensor a = g.input("a", DType::F32, {3, 4});
  Tensor b = g.input("b", DType::F32, {5, 6});
  CHECK_THROWS_WITH(matmul(a, b), Catch::Contains("matmul: shapes [3, 4] and [5, 6] do not match: contracted dims 4 and 5 differ"));
  Tensor c = g.input("c", DType::F32, {2, 4, 6});
  Tensor d = g.input("d", DType::F32, {3, 6, 4});
  CHECK_THROWS_WITH(matmul(c, d), Catch::Contains("batch dims that cannot be broadcast"));
  Tensor s = g.input("s", DType::F32);
  CHECK_THROWS_WITH(matmul(s, a), Catch::Contains("at least 1 dim"));
}
