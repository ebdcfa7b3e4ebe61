"""Reports: the records, building, markdown, cost attribution, plots."""
