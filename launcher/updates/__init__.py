"""Updates: the signed release feed, and the app and its engine packs updating themselves when asked."""
