"""Inference engines behind one seam (`base.Engine`). Runtimes are imported lazily, per engine."""
