"""Tables, plots (matplotlib) and self-contained HTML reports."""
