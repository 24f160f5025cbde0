"""Reporting: runs that combine metrics into tables, pages, files and results rows."""
