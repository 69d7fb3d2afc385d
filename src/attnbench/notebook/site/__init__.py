"""Building the site from stored results: pages, artifacts, the headline and the comparison."""
