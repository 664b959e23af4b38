"""Settings, paths, errors and logging shared by every layer."""
