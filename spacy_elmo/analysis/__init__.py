"""Looking inside a biLM: layer probes, nearest uses in context, plots and a model report."""
