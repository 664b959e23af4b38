"""SGLang, run as a child server (launcher/engines/child/): its spec, and the words it alone needs."""
