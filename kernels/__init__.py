"""tunetable kernels: CUDA C templates, snippets, generated tuning tables and runtime dispatch."""
