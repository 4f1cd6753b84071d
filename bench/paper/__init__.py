"""Controls of the Right Reset paper: the KL-margin mechanism, Wiki-50, and GPU scoring for the benchmarks."""
