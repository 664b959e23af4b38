"""The curated catalog, the local library, Hub search and downloads."""
