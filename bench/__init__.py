"""Side-by-side benchmarks: Vigil against baselines and peers, reported as ratios."""
