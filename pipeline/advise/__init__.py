"""`make advise`: every recipe ranked by the deployments it allows, from the runs' results and
the roofline bound (rank.py), and its report (report.py)."""
