"""What a run shows people: the HTML report and its figures, the terminal table,
cell summaries, and the comparison of two runs. Reads results; runs nothing."""
