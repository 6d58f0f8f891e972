"""`make gpu-check` and `make gpu-bundle`: a GPU host's own check of the whole pipeline (it runs
the CLI's commands as a user would, so it sits above every stage), and the offline bundle that
carries it to a host without network. No stage imports it."""
