"""Small reusable widgets (sparkline, cards, copyable fields)."""
