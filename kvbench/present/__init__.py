"""Presentation: terminal tables, comparisons and gates, the HTML/Markdown report, plots, timeline."""
