"""What a SavedModel's signature can execute: the ops reachable from it."""

# Ops only AugMix puts in a graph (besides random ops, which serving must not have either).
AUGMIX_OPS = {"ImageProjectiveTransformV3", "DenseBincount", "Bincount", "StringToHashBucketFast",
              "DynamicPartition", "DynamicStitch"}


def reachable_op_types(concrete_function):
  """Op types the function can execute, following calls into its function library."""
  graph_def = concrete_function.graph.as_graph_def()
  library = {f.signature.name: f for f in graph_def.library.function}
  seen, op_types = set(), set()

  def visit(nodes):
    for node in nodes:
      op_types.add(node.op)
      for attr in node.attr.values():
        called = [attr.func.name] if attr.HasField("func") else [f.name for f in attr.list.func]
        for name in called:
          if name in library and name not in seen:
            seen.add(name)
            visit(library[name].node_def)

  visit(graph_def.node)
  return op_types


def augmix_or_random_ops(op_types):
  return (op_types & AUGMIX_OPS) | {op for op in op_types if "Random" in op}
