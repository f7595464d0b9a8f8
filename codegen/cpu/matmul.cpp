// CPU matmuls: BlockedMatmul (BLIS-style) and MatmulRows.
#include "codegen/cpu/emitter.h"

#include <algorithm>

namespace fuse::codegen {

using ir::DType;
using ir::Node;
using ir::NodeId;
using ir::OpKind;

void CpuKernelEmitter::emit_matmul(mlir::Value begin, mlir::Value end) {
  NodeId mm = ir::matmul_node(k_);
  const Node& n = k_.body.node(mm);
  int lanes = std::max(1, k_.schedule.cpu.vector_width);
  int b_axis = static_cast<int>(k_.body.node(n.inputs[1]).shape.size()) - 1;
  bool strips = lanes > 1 && access_.inner(n.inputs[1], b_axis) <= ir::InnerAccess::Unit && access_.epilogue_on_column_vectors();
  if (!strips) {
    loop(begin, end, 1, [&](mlir::Value row) { emit_matmul_columns(row, i64(0)); });
    return;
  }
  // Several rows per block only without batch dims: rows of a block then share B.
  int64_t block = k_.space.size() == 2 ? kMatmulRows : 1;
  mlir::Value blocks_end = whole_steps_end(begin, end, block);
  loop(begin, blocks_end, block, [&](mlir::Value row) { emit_matmul_strips(row, block, lanes); });
  loop(blocks_end, end, 1, [&](mlir::Value row) { emit_matmul_strips(row, 1, lanes); });
}

void CpuKernelEmitter::emit_matmul_blocked(mlir::Value begin, mlir::Value end) {
  MatmulPlan p;
  p.mm = ir::matmul_node(k_);
  const Node& n = k_.body.node(p.mm);
  p.t = n.dtype;
  p.tiling = matmul_tiling();
  const MatmulTiling& t = p.tiling;
  int rank = static_cast<int>(k_.space.size());
  p.m = dim(k_.space[rank - 2]);
  p.n = dim(k_.space[rank - 1]);
  p.k = dim(k_.body.node(n.inputs[0]).shape.back());
  int64_t elem = static_cast<int64_t>(ir::dtype_size(p.t));
  NodeId a_id = n.inputs[0];
  p.a_by_columns = access_.inner(a_id, rank - 1) > ir::InnerAccess::Unit && access_.inner(a_id, rank - 2) <= ir::InnerAccess::Unit;
  if (ir::matmul_reads_a_in_place(k_)) p.a_in_place = input_slot_.at(a_id);  // (an input: unit along K, never by columns)
  // Packing buffers as large as this problem needs (a full nc x kc panel of B is megabytes).
  mlir::Value kc_used = min_i64(i64(t.kc), max_i64(p.k, i64(1)));
  mlir::Value mc_used = min_i64(i64(t.mc), round_up(max_i64(p.m, i64(1)), t.mr));
  mlir::Value nc_used = min_i64(i64(t.nc), round_up(max_i64(p.n, i64(1)), t.nr));
  // (packed A's rows are kc apart, or its tiles of mr rows mr * kc apart: see pack_a)
  mlir::Value a_elements = mul(mc_used, i64(t.kc));
  if (p.a_in_place < 0) p.pack_a = allocate_slot(mul(add(a_elements, i64(t.lanes)), i64(elem)));
  // B: in the buffer the kernel's tasks share (ir::SharedPackedB, laid out from this run's K and
  // N) when the runtime passes one (it runs several tasks of at least mc rows), else packed by
  // each task for itself into one block's buffer, reused from block to block (warm in cache: on
  // 2 threads, sharing the packing of a 48 x 2048 x 2048, fresh memory for every block, took 10%
  // longer than packing all of B twice).
  mlir::Value private_bytes = mul(add(mul(nc_used, kc_used), i64(t.lanes)), i64(elem));
  SharedB shared;
  // 2-D matmuls: the runtime's split (ir::MatmulSplit) from the header of the buffer it passes
  // after the constants; without one, rows only and nothing shared.
  bool by_columns = ir::shares_packed_b(k_);
  mlir::Value column_tasks = i64(1);
  if (by_columns) {
    mlir::Value header = base_[slot_count_];
    mlir::Value passed = cmpi(mlir::arith::CmpIPredicate::ne, b_.create<mlir::LLVM::PtrToIntOp>(loc_, i64_type(), header), i64(0));
    auto split = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange{i64_type(), i64_type()}, passed, /*withElseRegion=*/true);
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(&split.getThenRegion().front());
      auto word = [&](int64_t i) {
        mlir::Value at = b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), i64_type(), header, mlir::ValueRange{i64(i)});
        return b_.create<mlir::LLVM::LoadOp>(loc_, i64_type(), at).getResult();
      };
      b_.create<mlir::scf::YieldOp>(loc_, mlir::ValueRange{word(0), word(1)});
      b_.setInsertionPointToStart(&split.getElseRegion().front());
      b_.create<mlir::scf::YieldOp>(loc_, mlir::ValueRange{i64(1), i64(0)});
    }
    column_tasks = max_i64(split.getResult(0), i64(1));
    // (With A in place the tasks never share B: ir::matmul_split.)
    if (p.a_in_place < 0) {
      shared.present = cmpi(mlir::arith::CmpIPredicate::ne, split.getResult(1), i64(0));
      shared.flags = b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), b_.getI8Type(), header, mlir::ValueRange{i64(ir::kMatmulSplitBytes)});
      private_bytes = b_.create<mlir::arith::SelectOp>(loc_, shared.present, i64(64), private_bytes);
      mlir::Value k_blocks = max_i64(div(add(p.k, i64(t.kc - 1)), i64(t.kc)), i64(1));
      shared.groups = div(add(p.n, i64(t.group_columns - 1)), i64(t.group_columns));
      mlir::Value flags_bytes = mul(div(add(mul(mul(k_blocks, shared.groups), i64(4)), i64(63)), i64(64)), i64(64));
      shared.panels = b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), b_.getI8Type(), shared.flags, mlir::ValueRange{flags_bytes});
      shared.padded_columns = round_up(p.n, t.nr);
    }
  }
  p.pack_b = allocate_slot(private_bytes);
  if (shared.flags) {
    shared.own = p.pack_b;
    base_.push_back(base_[shared.own]);  // each block's panels, set by pack_b_in_groups
    p.pack_b = static_cast<int>(base_.size()) - 1;
  }
  // Partial sums over K blocks: in an output of the matmul's dtype (overwritten by its final
  // value at the last K block), else in a task-local buffer of the task's rows.
  int acc_output = -1;
  for (size_t o = 0; o < k_.body.outputs.size(); ++o)
    if (k_.body.node(k_.body.outputs[o].node).dtype == p.t) acc_output = static_cast<int>(o);
  mlir::Value many_k_blocks = cmpi(mlir::arith::CmpIPredicate::sgt, p.k, i64(t.kc));
  if (acc_output >= 0) {
    p.acc = output_slot_[acc_output];
    p.acc_origin = i64(0);
  } else {
    // Only needed with several K blocks: one element when K fits one block. A 2-D task's rows
    // of one column task at a time.
    mlir::Value task_rows = by_columns ? min_i64(sub(end, begin), max_i64(p.m, i64(1))) : sub(end, begin);
    mlir::Value rows = b_.create<mlir::arith::SelectOp>(loc_, many_k_blocks, task_rows, i64(1));
    p.acc = allocate_slot(mul(mul(rows, max_i64(p.n, i64(1))), i64(elem)));
    p.acc_origin = begin;
  }
  // The epilogue's cost: its scalar ops (the nodes computed from the product). From one
  // transcendental on, it is emitted once per tile row in a loop instead of once per accumulator
  // (mr x nr / lanes copies, in each of the whole- and edge-tile paths): a tile's round trip
  // through the buffer is mr x nr / lanes vector stores and loads against the K loop's
  // kb x mr x nr / lanes FMAs. Measured on the transformer block's MLP matmul with its GELU
  // epilogue (Zen 4 VM): 290 ms to compile unrolled.
  std::vector<bool> from_product(k_.body.nodes.size(), false);
  from_product[p.mm] = true;
  int epilogue_cost = 0;
  for (size_t id = p.mm + 1; id < k_.body.nodes.size(); ++id) {
    const Node& m = k_.body.node(static_cast<NodeId>(id));
    for (NodeId in : m.inputs) from_product[id] = from_product[id] || from_product[in];
    if (from_product[id] && m.kind == OpKind::Elementwise) epilogue_cost += m.as<ir::ElementwiseAttrs>().body.cost();
  }
  if (epilogue_cost >= ir::kTranscendentalCost) p.tile = allocate_slot(i64(t.mr * t.nr * elem));
  ir::Shape batch_shape(k_.space.begin(), k_.space.end() - 2);
  mlir::Value m_rows = max_i64(p.m, i64(1));
  // The parallel iterations in pieces of M rows: a batch each, or in a 2-D matmul a column task
  // each (ir::MatmulSplit: its columns a whole number of groups, so jc stays one too).
  mlir::Value first_piece = div(begin, m_rows);
  mlir::Value last_piece = div(add(end, sub(m_rows, i64(1))), m_rows);
  mlir::Value column_groups = div(add(p.n, i64(t.group_columns - 1)), i64(t.group_columns));
  loop(first_piece, last_piece, 1, [&](mlir::Value piece) {
    mlir::Value batch = by_columns ? i64(0) : piece;
    p.batch = delinearize(batch, batch_shape);
    mlir::Value batch_row = mul(batch, p.m);
    mlir::Value piece_row = mul(piece, p.m);
    mlir::Value r0 = sub(max_i64(begin, piece_row), piece_row);
    mlir::Value r1 = sub(min_i64(end, add(piece_row, p.m)), piece_row);
    mlir::Value c0 = i64(0), c1 = p.n;
    if (by_columns) {
      auto group_bound = [&](mlir::Value task) {
        return min_i64(mul(div(mul(task, column_groups), column_tasks), i64(t.group_columns)), p.n);
      };
      c0 = group_bound(piece);
      c1 = group_bound(add(piece, i64(1)));
      if (acc_output < 0) p.acc_origin = r0;
    }
    mlir::Value few_rows = cmpi(mlir::arith::CmpIPredicate::sle, sub(r1, r0), i64(t.mc / 2));
    mlir::Value nc = b_.create<mlir::arith::SelectOp>(loc_, few_rows, i64(t.nc_few_rows), i64(t.nc));
    loop(c0, c1, nc, [&](mlir::Value jc) {
      mlir::Value nb = min_i64(nc, sub(c1, jc));
      // At least one K block, so that K = 0 still writes the (empty-sum) result.
      loop(i64(0), max_i64(p.k, i64(1)), t.kc, [&](mlir::Value pc) {
        mlir::Value kb = max_i64(min_i64(i64(t.kc), sub(p.k, pc)), i64(0));
        mlir::Value first = cmpi(mlir::arith::CmpIPredicate::eq, pc, i64(0));
        mlir::Value last = cmpi(mlir::arith::CmpIPredicate::sge, add(pc, kb), p.k);
        // Whole tiles step K kKLoopUnroll at a time: in a K block of another depth (the last, at
        // most) every tile takes the edge path, whose loop steps once.
        mlir::Value unrolls = cmpi(mlir::arith::CmpIPredicate::eq, b_.create<mlir::arith::RemUIOp>(loc_, kb, i64(kKLoopUnroll)), i64(0));
        if (shared.flags) pack_b_in_groups(p, pc, kb, jc, nb, shared);
        else pack_b(p, pc, kb, jc, nb);
        loop(r0, r1, t.mc, [&](mlir::Value ic) {
          mlir::Value mb = min_i64(i64(t.mc), sub(r1, ic));
          if (p.a_in_place < 0) pack_a(p, ic, mb, pc, kb);
          loop(i64(0), nb, t.nr, [&](mlir::Value jr) {
            loop(i64(0), mb, t.mr, [&](mlir::Value ir) {
              mlir::Value rows = min_i64(i64(t.mr), sub(mb, ir));
              mlir::Value cols = min_i64(i64(t.nr), sub(nb, jr));
              mlir::Value whole = b_.create<mlir::arith::AndIOp>(loc_, cmpi(mlir::arith::CmpIPredicate::eq, rows, i64(t.mr)),
                                                                 cmpi(mlir::arith::CmpIPredicate::eq, cols, i64(t.nr)));
              whole = b_.create<mlir::arith::AndIOp>(loc_, whole, unrolls);
              mlir::Value row = add(batch_row, add(ic, ir)), col = add(jc, jr);
              auto tile = [&](mlir::Value rows, mlir::Value cols, TileForm form) {
                micro_kernel(p, row, col, ir, jr, pc, kb, first, last, rows, cols, form);
              };
              auto branch = b_.create<mlir::scf::IfOp>(loc_, whole, /*withElseRegion=*/true);
              mlir::OpBuilder::InsertionGuard guard(b_);
              b_.setInsertionPointToStart(&branch.getThenRegion().front());
              tile({}, {}, {t.mr, kKLoopUnroll});
              b_.setInsertionPointToStart(&branch.getElseRegion().front());
              // Edge tiles step K once (each copy of the step costs compile time) and compute
              // all mr rows, except that a tile of at most mr / 3 computes only those: a matmul
              // of few rows (a small batch) is mostly such tiles (1 x 4096 x 4096 on the 2-vCPU
              // Intel Xeon 4.9 -> 4.1 ms; stepping K four at a time ran no faster). A tile of at
              // most nr / 2 columns computing only those ran 4096 x 4096 x 16 about 10% faster
              // (packing A bounds it) but made the transformer block's compile 25% longer.
              if (t.mr / 3 >= 1) {
                auto few = b_.create<mlir::scf::IfOp>(loc_, cmpi(mlir::arith::CmpIPredicate::sle, rows, i64(t.mr / 3)), true);
                b_.setInsertionPointToStart(&few.getThenRegion().front());
                tile(rows, cols, {t.mr / 3, 1});
                b_.setInsertionPointToStart(&few.getElseRegion().front());
              }
              tile(rows, cols, {t.mr, 1});
            });
          });
        });
      });
    });
  });
  release_scratch();
}

// Block (jc, pc) of B: a group of panels at a time into the shared buffer when the runtime
// passed one (each group packed by the task that claims it first; then a wait for the groups
// other tasks claimed), else all of it into the task's own buffer. One copy of pack_b either
// way: with a second one, `fusec examples/matmul.expr --emit=obj` took 0.30 s, not 0.23. Leaves slot p.pack_b at the block's
// panels, laid out as pack_b lays out a block.
void CpuKernelEmitter::pack_b_in_groups(MatmulPlan& p, mlir::Value pc, mlir::Value kb, mlir::Value jc, mlir::Value nb,
                                        const SharedB& shared) {
  const MatmulTiling& t = p.tiling;
  mlir::Value k_block = div(pc, i64(t.kc));
  mlir::Value shared_start = add(mul(k_block, mul(i64(t.kc), shared.padded_columns)), mul(jc, kb));
  // jc is a whole number of groups (MatmulTiling::nc).
  mlir::Value first_flag = add(mul(k_block, shared.groups), div(jc, i64(t.group_columns)));
  // Without the shared buffer, the whole block as one group: pack_b then reads eight of B's rows
  // at a time along their whole width (a 6 x 2048 x 2048 packed group by group took 20% longer).
  mlir::Value group_columns = b_.create<mlir::arith::SelectOp>(loc_, shared.present, i64(t.group_columns), nb);
  mlir::Value block_groups = div(add(nb, sub(group_columns, i64(1))), group_columns);
  mlir::Value shared_block =
      b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), memory_type(p.t), shared.panels, mlir::ValueRange{shared_start});
  mlir::Value block = b_.create<mlir::arith::SelectOp>(loc_, shared.present, shared_block, base_[shared.own]);
  auto flag = [&](mlir::Value g) {
    return b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), b_.getI32Type(), shared.flags, mlir::ValueRange{add(first_flag, g)})
        .getResult();
  };
  // Runs body only with the shared buffer.
  auto if_shared = [&](auto body) {
    auto branch = b_.create<mlir::scf::IfOp>(loc_, shared.present, /*withElseRegion=*/false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&branch.getThenRegion().front());
    body();
  };
  mlir::Type void_type = mlir::LLVM::LLVMVoidType::get(b_.getContext());
  loop(i64(0), block_groups, 1, [&](mlir::Value g) {
    // Ours to pack: claimed, or no one else's (no shared buffer).
    auto claim = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange{b_.getI1Type()}, shared.present, /*withElseRegion=*/true);
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(&claim.getThenRegion().front());
      mlir::Value claimed = call_c("fuse_cpu_claim_panels", b_.getI32Type(), mlir::ValueRange{flag(g)});
      b_.create<mlir::scf::YieldOp>(
          loc_, mlir::ValueRange{b_.create<mlir::arith::CmpIOp>(loc_, mlir::arith::CmpIPredicate::ne, claimed,
                                                                b_.create<mlir::arith::ConstantIntOp>(loc_, 0, 32))
                                     .getResult()});
      b_.setInsertionPointToStart(&claim.getElseRegion().front());
      b_.create<mlir::scf::YieldOp>(loc_, mlir::ValueRange{b_.create<mlir::arith::ConstantIntOp>(loc_, 1, 1).getResult()});
    }
    auto mine = b_.create<mlir::scf::IfOp>(loc_, claim.getResult(0), /*withElseRegion=*/false);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&mine.getThenRegion().front());
    mlir::Value first_column = mul(g, group_columns);
    base_[p.pack_b] =
        b_.create<mlir::LLVM::GEPOp>(loc_, ptr_type(), memory_type(p.t), block, mlir::ValueRange{mul(first_column, kb)});
    pack_b(p, pc, kb, add(jc, first_column), min_i64(group_columns, sub(nb, first_column)));
    if_shared([&] { call_c("fuse_cpu_publish_panels", void_type, mlir::ValueRange{flag(g)}); });
  });
  if_shared([&] {
    loop(i64(0), block_groups, 1,
         [&](mlir::Value g) { call_c("fuse_cpu_wait_for_panels", void_type, mlir::ValueRange{flag(g)}); });
  });
  base_[p.pack_b] = block;
}

// Rounds x up to a multiple of `to`.
mlir::Value CpuKernelEmitter::round_up(mlir::Value x, int64_t to) {
  return mul(div(add(x, i64(to - 1)), i64(to)), i64(to));
}

// B[pc : pc + kb, jc : jc + nb] into panels of nr columns: panel q holds, for each k, the
// columns [q*nr, q*nr + nr) contiguously. The last panel's columns past nb are padding: they
// are written too (masked-off lanes or a copy of the last column), because the micro-kernel
// computes whole tiles, and a lane read from never-written memory is undefined in LLVM: once
// such a lane reached a branch (the f32 patch test of sigmoid), LLVM proved the tile loop
// unreachable and compiled it to a jump to itself.
void CpuKernelEmitter::pack_b(const MatmulPlan& p, mlir::Value pc, mlir::Value kb, mlir::Value jc, mlir::Value nb) {
  const MatmulTiling& t = p.tiling;
  NodeId b_id = k_.body.node(p.mm).inputs[1];
  int rank = static_cast<int>(k_.space.size());
  auto packed_offset = [&](mlir::Value kk, mlir::Value jj) {  // jj relative to jc
    mlir::Value panel = div(jj, i64(t.nr));
    return add(mul(panel, mul(kb, i64(t.nr))), add(mul(kk, i64(t.nr)), sub(jj, mul(panel, i64(t.nr)))));
  };
  mlir::Value padded = round_up(nb, t.nr);
  if (access_.inner(b_id, rank - 1) <= ir::InnerAccess::Unit) {
    // Row k of column j0 + c goes to (j0 / nr) * kb * nr + k * nr + c: panel j0 starts at j0 * kb.
    auto copy_row_of_panel = [&](mlir::Value kk, mlir::Value j0) {
      std::vector<mlir::Value> idx0 = p.batch;
      idx0.push_back(add(pc, kk));
      idx0.push_back(i64(0));
      mlir::Value row_start = add(mul(j0, kb), mul(kk, i64(t.nr)));
      for (int64_t c = 0; c < t.nr; c += t.lanes) {
        mlir::Value jj = add(j0, i64(c));
        mlir::Value v;
        masked(sub(nb, jj), t.lanes, [&] { v = lane_value(b_id, idx0, rank - 1, add(jc, jj), t.lanes); });
        store(p.pack_b, p.t, add(row_start, i64(c)), v, t.lanes);  // whole vectors: padding included
      }
    };
    // kPackRows rows at a time across all panels: the reads are kPackRows streams along B's
    // rows and the stores kPackRows x nr elements in order per panel. Row by row, each row's
    // stores went to nb / nr places kc x nr elements apart (one L1 set); panel by panel, the
    // reads were one line per row, N elements apart.
    constexpr int64_t kPackRows = 8;
    mlir::Value whole_rows = mul(div(kb, i64(kPackRows)), i64(kPackRows));
    loop(i64(0), whole_rows, kPackRows, [&](mlir::Value k0) {
      loop(i64(0), padded, t.nr, [&](mlir::Value j0) {
        for (int64_t r = 0; r < kPackRows; ++r) copy_row_of_panel(add(k0, i64(r)), j0);
      });
    });
    loop(whole_rows, kb, 1, [&](mlir::Value kk) {
      loop(i64(0), padded, t.nr, [&](mlir::Value j0) { copy_row_of_panel(kk, j0); });
    });
    return;
  }
  mlir::Value last = sub(nb, i64(1));
  // Element by element from K index `first_k` on, k innermost so that the reads of B follow its
  // smaller stride when it has one.
  auto by_elements = [&](mlir::Value first_k) {
    loop(i64(0), padded, 1, [&](mlir::Value jj) {
      loop(first_k, kb, 1, [&](mlir::Value kk) {
        std::vector<mlir::Value> idx = p.batch;
        idx.push_back(add(pc, kk));
        idx.push_back(add(jc, min_i64(jj, last)));  // padding: copies of the last column
        store(p.pack_b, p.t, packed_offset(kk, jj), general_value(b_id, idx), 1);
      });
    });
  };
  DType type = k_.body.node(b_id).dtype;
  bool power_of_two = t.lanes >= 2 && (t.lanes & (t.lanes - 1)) == 0;
  if (access_.inner(b_id, rank - 2) != ir::InnerAccess::Unit || ir::dtype_size(type) < 4 || !power_of_two) {
    by_elements(i64(0));  // strided along both (any other view)
    return;
  }
  // A transposed B (unit along K: `q @ k.T`): lanes x lanes blocks, each column read as one
  // vector along K and the block transposed in registers into rows of the panel; the K
  // remainder (kb not a whole number of vectors) element by element.
  mlir::Value whole_k = mul(div(kb, i64(t.lanes)), i64(t.lanes));
  loop(i64(0), padded, t.lanes, [&](mlir::Value jj) {
    std::vector<std::vector<mlir::Value>> column_index;
    for (int j = 0; j < t.lanes; ++j) {
      std::vector<mlir::Value> idx = p.batch;
      idx.push_back(i64(0));
      idx.push_back(add(jc, min_i64(add(jj, i64(j)), last)));
      column_index.push_back(std::move(idx));
    }
    loop(i64(0), whole_k, t.lanes, [&](mlir::Value kk) {
      std::vector<mlir::Value> columns;
      for (int j = 0; j < t.lanes; ++j)
        columns.push_back(lane_value(b_id, column_index[j], rank - 2, add(pc, kk), t.lanes));
      std::vector<mlir::Value> rows = transpose_in_registers(b_, loc_, std::move(columns));
      for (int r = 0; r < t.lanes; ++r) store(p.pack_b, p.t, packed_offset(add(kk, i64(r)), jj), rows[r], t.lanes);
    });
  });
  by_elements(whole_k);
}

// A[ic : ic + mb, pc : pc + kb] (rows of this batch) into packed A: row r at r * kc (A unit
// along K, or any other layout, element by element), or (A unit along M) the tile of mr rows
// from r at r * kc, step k of it at k * mr.
// Rows up to the next whole mr tile are written too (copies of the last row, or masked-off
// lanes): the micro-kernel reads whole tiles, and never-written lanes are undefined (pack_b).
void CpuKernelEmitter::pack_a(const MatmulPlan& p, mlir::Value ic, mlir::Value mb, mlir::Value pc, mlir::Value kb) {
  const MatmulTiling& t = p.tiling;
  NodeId a_id = k_.body.node(p.mm).inputs[0];
  int rank = static_cast<int>(k_.space.size());
  auto index = [&](mlir::Value row, mlir::Value kk) {
    std::vector<mlir::Value> idx = p.batch;
    idx.push_back(row);
    idx.push_back(kk);
    return idx;
  };
  mlir::Value padded = round_up(mb, t.mr);
  mlir::Value last = sub(mb, i64(1));
  if (access_.inner(a_id, rank - 1) <= ir::InnerAccess::Unit) {
    loop(i64(0), padded, 1, [&](mlir::Value r) {
      std::vector<mlir::Value> idx0 = index(add(ic, min_i64(r, last)), i64(0));
      loop(i64(0), kb, t.lanes, [&](mlir::Value kk) {
        masked(sub(kb, kk), t.lanes, [&] {
          mlir::Value v = lane_value(a_id, idx0, rank - 1, add(pc, kk), t.lanes);
          store(p.pack_a, p.t, add(mul(r, i64(t.kc)), kk), v, t.lanes);
        });
      });
    });
  } else if (p.a_by_columns) {
    // Tile by tile (micro-panels): the mr rows of step k of the tile at r at r * kc + k * mr, so
    // that the micro-kernel reads each tile's A as one stream. (Columns of mc, k * mc apart, took
    // a new line or two each step: x.T @ y ran 11-14% longer than x @ y.)
    loop(i64(0), kb, 1, [&](mlir::Value kk) {
      std::vector<mlir::Value> idx0 = index(i64(0), add(pc, kk));
      loop(i64(0), padded, t.mr, [&](mlir::Value r) {
        for (int64_t piece = 0; piece < t.mr; piece += t.lanes) {
          int64_t count = std::min<int64_t>(t.lanes, t.mr - piece);
          mlir::Value first_row = add(r, i64(piece)), v;
          // Rows past mb: masked-off lanes (written, so that no lane the tile reads is undefined).
          masked(min_i64(sub(mb, first_row), i64(count)), t.lanes,
                 [&] { v = lane_value(a_id, idx0, rank - 2, add(ic, first_row), t.lanes); });
          masked(i64(count), t.lanes,
                 [&] { store(p.pack_a, p.t, add(add(mul(r, i64(t.kc)), mul(kk, i64(t.mr))), i64(piece)), v, t.lanes); });
        }
      });
    });
  } else {
    loop(i64(0), padded, 1, [&](mlir::Value r) {
      loop(i64(0), kb, 1, [&](mlir::Value kk) {
        store(p.pack_a, p.t, add(mul(r, i64(t.kc)), kk),
              general_value(a_id, index(add(ic, min_i64(r, last)), add(pc, kk))), 1);
      });
    });
  }
}

mlir::Value CpuKernelEmitter::fma(mlir::Value a, mlir::Value b, mlir::Value acc) {
  if (mlir::isa<mlir::FloatType>(mlir::getElementTypeOrSelf(acc.getType())))
    return b_.create<mlir::vector::FMAOp>(loc_, a, b, acc);
  return add(acc, mul(a, b));
}

void CpuKernelEmitter::micro_kernel(const MatmulPlan& p, mlir::Value row, mlir::Value col, mlir::Value ir, mlir::Value jr, mlir::Value pc,
                                    mlir::Value kb, mlir::Value first, mlir::Value last, mlir::Value rows, mlir::Value cols,
                                    TileForm form) {
  const MatmulTiling& t = p.tiling;
  int64_t mr = form.mr, unroll = form.unroll;
  int64_t vectors = t.nr / t.lanes;
  mlir::Type vec = lane_type(scalar_type(p.t), t.lanes);
  int64_t tile = mr * vectors;
  // Partial sums of tile row `r` (a Value: edge tiles clamp it), vector `v`.
  auto acc_offset = [&](mlir::Value r, int64_t v) {
    return add(mul(sub(add(row, r), p.acc_origin), p.n), add(col, i64(v * t.lanes)));
  };
  // Runs body for each row r of the tile that exists, under each vector's column mask.
  auto each_stored = [&](auto body) {
    for (int64_t r = 0; r < mr; ++r) {
      mlir::OpBuilder::InsertionGuard guard(b_);
      if (rows) {
        auto exists = b_.create<mlir::scf::IfOp>(loc_, cmpi(mlir::arith::CmpIPredicate::slt, i64(r), rows), false);
        b_.setInsertionPointToStart(&exists.getThenRegion().front());
      }
      clear_caches();
      for (int64_t v = 0; v < vectors; ++v) {
        if (cols) masked(sub(cols, i64(v * t.lanes)), t.lanes, [&] { body(r, v); });
        else body(r, v);
      }
      clear_caches();
    }
  };
  // The K loop starts from zero and the partial sums of earlier K blocks are added after it (as
  // BLIS's C += A B), prefetched before it: loaded before the loop, they held every FMA chain
  // back for a miss per tile (C's rows are N apart and were last touched a whole pass ago).
  auto partial_offset = [&](int64_t r, int64_t v) {
    // Rows past an edge tile's end read row `row` again (in bounds; never stored).
    return acc_offset(rows ? min_i64(i64(r), sub(rows, i64(1))) : i64(r), v);
  };
  {
    auto later_block = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange{}, first, /*withElseRegion=*/true);
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&later_block.getElseRegion().front());
    for (int64_t r = 0; r < mr; ++r)
      for (int64_t v = 0; v < vectors; ++v)
        b_.create<mlir::LLVM::Prefetch>(loc_, element_address(p.acc, p.t, partial_offset(r, v)), /*rw=*/0u,
                                        /*locality=*/3u, /*data cache=*/1u);
  }
  // The K loop: one outer product of a column of packed A and a row of packed B per k.
  mlir::Value a_base = mul(ir, i64(t.kc));
  int64_t a_row_stride = p.a_by_columns ? 1 : t.kc;
  int64_t a_k_stride = p.a_by_columns ? t.mr : 1;
  // A in place (p.a_in_place): row r of the tile at (row + r) * K, from the K block's start. A
  // whole tile reads its rows from one pointer per kRowsPerBase rows, each row of a group at
  // that pointer plus 0, K or 2 K (x86 addresses them with K in a register, scaled by 4 or 8).
  // The pointers are the K loop's own (iter_args), each stepped past an empty asm: without it,
  // LLVM's loop strength reduction chained every row's address from the last one (an lea per
  // row and step) and the 12 x 32 tile's loop spilled its broadcasts to the stack. Edge tiles
  // read rows past their end as the last row (in bounds; never stored).
  constexpr int64_t kRowsPerBase = 3;
  int a_slot = p.pack_a;
  std::vector<mlir::Value> a_row_offsets, a_group_start, a_stride, a_group;
  if (p.a_in_place >= 0) {
    a_slot = p.a_in_place;
    a_base = add(mul(row, p.k), pc);
    if (rows) {
      for (int64_t r = 0; r < mr; ++r) a_row_offsets.push_back(mul(min_i64(i64(r), sub(rows, i64(1))), p.k));
    } else {
      for (int64_t g = 0; g < mr; g += kRowsPerBase) a_group_start.push_back(element_address(a_slot, p.t, add(a_base, mul(i64(g), p.k))));
      for (int64_t i = 0; i < kRowsPerBase; ++i) a_stride.push_back(mul(i64(i), p.k));
    }
  }
  // Step u's element of tile row r of A (base_[a_slot] at the iteration's first step).
  auto a_element = [&](int64_t r, int64_t u) {
    if (p.a_in_place < 0) return load(a_slot, p.t, i64(u * a_k_stride + r * a_row_stride), 1);
    if (a_group.empty()) return load(a_slot, p.t, add(a_row_offsets[r], i64(u)), 1);
    mlir::Value saved = base_[a_slot];
    base_[a_slot] = a_group[r / kRowsPerBase];
    int64_t i = r % kRowsPerBase;
    mlir::Value v = load(a_slot, p.t, i == 0 ? i64(u) : add(a_stride[i], i64(u)), 1);
    base_[a_slot] = saved;
    return v;
  };
  mlir::Value b_base = mul(jr, kb);  // panel jr / nr starts at jr * kb
  // Step `u` of an iteration of the K loop: the accumulators after its outer product. Packed A
  // and B are addressed from pointers at the iteration's first step, at constant offsets (one
  // address computation per iteration, not one per step).
  int64_t elem = static_cast<int64_t>(ir::dtype_size(p.t));
  int64_t row_bytes = t.nr * elem;
  int64_t ahead = std::max<int64_t>(1, kPackedBPrefetchBytes / row_bytes) * t.nr;
  auto k_step = [&](int64_t u, const std::vector<mlir::Value>& acc) {
    std::vector<mlir::Value> bv;
    for (int64_t v = 0; v < vectors; ++v) bv.push_back(load(p.pack_b, p.t, i64(u * t.nr + v * t.lanes), t.lanes));
    // One prefetch per line of this row of the panel (nr elements), kPackedBPrefetchBytes on:
    // past the panel's end they fetch the next panel's start, which the next tile column reads.
    for (int64_t line = 0; line < row_bytes; line += 64)
      b_.create<mlir::LLVM::Prefetch>(loc_, element_address(p.pack_b, p.t, i64(u * t.nr + ahead + line / elem)),
                                      /*rw=*/0u, /*locality=*/3u, /*data cache=*/1u);
    std::vector<mlir::Value> next;
    for (int64_t r = 0; r < mr; ++r) {
      mlir::Value a = b_.create<mlir::vector::BroadcastOp>(loc_, vec, a_element(r, u));
      for (int64_t v = 0; v < vectors; ++v) next.push_back(fma(a, bv[v], acc[r * vectors + v]));
    }
    return next;
  };
  std::vector<mlir::Value> k_loop_init(tile, constant(p.t, 0, 0, t.lanes));
  k_loop_init.insert(k_loop_init.end(), a_group_start.begin(), a_group_start.end());
  auto k_loop = b_.create<mlir::scf::ForOp>(loc_, i64(0), kb, i64(unroll), k_loop_init);
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(k_loop.getBody());
    mlir::Value kk = k_loop.getInductionVar();
    // k_step reads the slots of packed A and B from this iteration's first step.
    mlir::Value a_buffer = base_[a_slot], b_buffer = base_[p.pack_b];
    // (A whole tile in place reads A from the pointers the loop carries instead.)
    if (a_group_start.empty()) base_[a_slot] = element_address(a_slot, p.t, add(a_base, mul(kk, i64(a_k_stride))));
    base_[p.pack_b] = element_address(p.pack_b, p.t, add(b_base, mul(kk, i64(t.nr))));
    auto args = k_loop.getRegionIterArgs();
    std::vector<mlir::Value> acc(args.begin(), args.begin() + tile);
    a_group.assign(args.begin() + tile, args.end());
    for (int64_t u = 0; u < unroll; ++u) acc = k_step(u, acc);
    for (mlir::Value g : a_group) {
      base_[a_slot] = g;
      acc.push_back(b_.create<mlir::LLVM::InlineAsmOp>(loc_, ptr_type(), mlir::ValueRange{element_address(a_slot, p.t, i64(unroll))},
                                                       "", "=r,0", /*has_side_effects=*/false, /*is_align_stack=*/false,
                                                       mlir::LLVM::AsmDialectAttr(), mlir::ArrayAttr())
                        .getResult(0));
    }
    a_group.clear();
    b_.create<mlir::scf::YieldOp>(loc_, acc);
    base_[a_slot] = a_buffer;
    base_[p.pack_b] = b_buffer;
  }
  // The tile: this K block's products, plus the partial sums after the first block.
  auto sums = b_.create<mlir::scf::IfOp>(loc_, mlir::TypeRange(std::vector<mlir::Type>(tile, vec)), first, true);
  {
    mlir::OpBuilder::InsertionGuard guard(b_);
    b_.setInsertionPointToStart(&sums.getThenRegion().front());
    b_.create<mlir::scf::YieldOp>(loc_, k_loop.getResults().take_front(tile));
    b_.setInsertionPointToStart(&sums.getElseRegion().front());
    std::vector<mlir::Value> total;
    for (int64_t r = 0; r < mr; ++r)
      for (int64_t v = 0; v < vectors; ++v) {
        mlir::Value partial;
        if (cols) masked(sub(cols, i64(v * t.lanes)), t.lanes, [&] { partial = load(p.acc, p.t, partial_offset(r, v), t.lanes); });
        else partial = load(p.acc, p.t, partial_offset(r, v), t.lanes);
        mlir::Value product = k_loop.getResult(r * vectors + v);
        total.push_back(ir::is_float(p.t) ? mlir::Value(b_.create<mlir::arith::AddFOp>(loc_, partial, product)) : add(partial, product));
      }
    b_.create<mlir::scf::YieldOp>(loc_, total);
  }
  // Done with K: the epilogue and the outputs; else the partial sums back.
  auto finish = b_.create<mlir::scf::IfOp>(loc_, last, true);
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(&finish.getThenRegion().front());
  int c_axis = static_cast<int>(k_.space.size()) - 1;
  // The epilogue of tile row r (a Value) and vector v on the product's values `product`.
  auto epilogue = [&](mlir::Value r, int64_t v, mlir::Value product) {
    matmul_strip_ = product;
    std::vector<mlir::Value> idx0 = delinearize(add(row, r), ir::Shape(k_.space.begin(), k_.space.end() - 1));
    idx0.push_back(i64(0));
    mlir::Value c = add(col, i64(v * t.lanes));
    for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
      NodeId out = k_.body.outputs[o].node;
      store(output_slot_[o], k_.body.node(out).dtype, add(mul(add(row, r), p.n), c),
            lane_value(out, idx0, c_axis, c, t.lanes), t.lanes);
    }
    lane_cache_.clear();
    matmul_strip_ = {};
  };
  if (p.tile >= 0) {
    for (int64_t r = 0; r < mr; ++r)
      for (int64_t v = 0; v < vectors; ++v)
        store(p.tile, p.t, i64(r * t.nr + v * t.lanes), sums.getResult(r * vectors + v), t.lanes);
    loop(i64(0), rows ? rows : i64(mr), 1, [&](mlir::Value r) {
      for (int64_t v = 0; v < vectors; ++v) {
        // Whole vectors (every lane was stored above), outside the column mask.
        mlir::Value product = load(p.tile, p.t, add(mul(r, i64(t.nr)), i64(v * t.lanes)), t.lanes);
        if (cols) masked(sub(cols, i64(v * t.lanes)), t.lanes, [&] { epilogue(r, v, product); });
        else epilogue(r, v, product);
      }
    });
  } else {
    each_stored([&](int64_t r, int64_t v) { epilogue(i64(r), v, sums.getResult(r * vectors + v)); });
  }
  b_.setInsertionPointToStart(&finish.getElseRegion().front());
  each_stored([&](int64_t r, int64_t v) { store(p.acc, p.t, acc_offset(i64(r), v), sums.getResult(r * vectors + v), t.lanes); });
}

void CpuKernelEmitter::emit_matmul_strips(mlir::Value first_row, int64_t rows, int lanes) {
  NodeId mm = ir::matmul_node(k_);
  const Node& n = k_.body.node(mm);
  const ir::Shape& b_shape = k_.body.node(n.inputs[1]).shape;
  ir::Shape rows_shape(k_.space.begin(), k_.space.end() - 1);
  DType acc_type = ir::is_float(n.dtype) ? DType::F64 : DType::I64;
  bool floating = acc_type == DType::F64;
  mlir::Value width = dim(k_.space.back());
  std::vector<std::vector<mlir::Value>> row_idx;
  for (int64_t q = 0; q < rows; ++q) row_idx.push_back(delinearize(add(first_row, i64(q)), rows_shape));
  mlir::Value strips_end = mul(div(width, i64(lanes)), i64(lanes));
  loop(i64(0), strips_end, lanes, [&](mlir::Value j) {
    std::vector<mlir::Value> init(rows, constant(acc_type, 0, 0, lanes));
    auto dot = b_.create<mlir::scf::ForOp>(loc_, i64(0), dim(k_.body.node(n.inputs[0]).shape.back()), i64(1), init);
    {
      mlir::OpBuilder::InsertionGuard guard(b_);
      b_.setInsertionPointToStart(dot.getBody());
      clear_caches();
      mlir::Value kk = dot.getInductionVar();
      // B's row k for row 0's batch (every row of a block has the same batch: no batch dims).
      std::vector<mlir::Value> b_idx(row_idx[0].begin(), row_idx[0].end() - 1);
      b_idx.push_back(kk);
      b_idx.push_back(i64(0));
      mlir::Value b = cast(lane_value(n.inputs[1], b_idx, static_cast<int>(b_shape.size()) - 1, j, lanes), n.dtype,
                           acc_type, lanes);
      std::vector<mlir::Value> next;
      for (int64_t q = 0; q < rows; ++q) {
        std::vector<mlir::Value> a_idx = row_idx[q];
        a_idx.push_back(kk);
        mlir::Value a = cast(general_value(n.inputs[0], a_idx), n.dtype, acc_type, 1);
        a = b_.create<mlir::vector::BroadcastOp>(loc_, lane_type(scalar_type(acc_type), lanes), a);
        mlir::Value acc = dot.getRegionIterArgs()[q];
        next.push_back(floating ? mlir::Value(b_.create<mlir::arith::AddFOp>(loc_, acc, b_.create<mlir::arith::MulFOp>(loc_, a, b)))
                                : add(acc, mul(a, b)));
      }
      b_.create<mlir::scf::YieldOp>(loc_, next);
      clear_caches();
    }
    for (int64_t q = 0; q < rows; ++q) {
      clear_caches();
      matmul_strip_ = cast(dot.getResult(q), acc_type, n.dtype, lanes);
      std::vector<mlir::Value> idx0 = row_idx[q];
      idx0.push_back(i64(0));
      mlir::Value row_start = mul(add(first_row, i64(q)), width);
      for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
        NodeId out = k_.body.outputs[o].node;
        store(output_slot_[o], k_.body.node(out).dtype, add(row_start, j),
              lane_value(out, idx0, static_cast<int>(k_.space.size()) - 1, j, lanes), lanes);
      }
    }
    matmul_strip_ = {};
  });
  for (int64_t q = 0; q < rows; ++q) emit_matmul_columns(add(first_row, i64(q)), strips_end);
}

// Columns [first_column, N) of one row of C: a dot product per element, operands and
// prologues read through index maps, the epilogue applied to each element. Any shape, dtype
// and view.
void CpuKernelEmitter::emit_matmul_columns(mlir::Value row, mlir::Value first_column) {
  NodeId mm = ir::matmul_node(k_);
  const Node& n = k_.body.node(mm);
  const ir::Shape& a_shape = k_.body.node(n.inputs[0]).shape;
  ir::Shape rows(k_.space.begin(), k_.space.end() - 1);
  std::vector<mlir::Value> row_idx = delinearize(row, rows);
  DType acc_type = ir::is_float(n.dtype) ? DType::F64 : DType::I64;
  auto columns = b_.create<mlir::scf::ForOp>(loc_, first_column, dim(k_.space.back()), i64(1));
  mlir::OpBuilder::InsertionGuard guard(b_);
  b_.setInsertionPointToStart(columns.getBody());
  clear_caches();
  mlir::Value j = columns.getInductionVar();
  auto dot = b_.create<mlir::scf::ForOp>(loc_, i64(0), dim(a_shape.back()), i64(1),
                                         mlir::ValueRange{constant(acc_type, 0, 0, 1)});
  {
    mlir::OpBuilder::InsertionGuard inner(b_);
    b_.setInsertionPointToStart(dot.getBody());
    clear_caches();
    mlir::Value kk = dot.getInductionVar();
    std::vector<mlir::Value> a_idx(row_idx), b_idx(row_idx.begin(), row_idx.end() - 1);
    a_idx.push_back(kk);
    b_idx.push_back(kk);
    b_idx.push_back(j);
    mlir::Value a = cast(general_value(n.inputs[0], a_idx), n.dtype, acc_type, 1);
    mlir::Value b = cast(general_value(n.inputs[1], b_idx), n.dtype, acc_type, 1);
    mlir::Value acc = dot.getRegionIterArgs()[0];
    mlir::Value next = ir::is_float(n.dtype)
                           ? mlir::Value(b_.create<mlir::arith::AddFOp>(loc_, acc, b_.create<mlir::arith::MulFOp>(loc_, a, b)))
                           : add(acc, mul(a, b));
    b_.create<mlir::scf::YieldOp>(loc_, next);
    clear_caches();
  }
  reduced_[mm] = cast(dot.getResult(0), acc_type, n.dtype, 1);
  std::vector<mlir::Value> c_idx(row_idx);
  c_idx.push_back(j);
  for (size_t o = 0; o < k_.body.outputs.size(); ++o) {
    const Node& out = k_.body.node(k_.body.outputs[o].node);
    store(output_slot_[o], out.dtype, linearize(c_idx, k_.space), general_value(k_.body.outputs[o].node, c_idx), 1);
  }
  clear_caches();
}

}  // namespace fuse::codegen
