"""One module per command: its flags (`add_arguments`) and its handler (`handle`) together, in
the order `pipeline --help` lists them. A new command is a module here and one line below."""

from pipeline.cli.commands import (
    advise,
    clean_cache,
    compare,
    eval,
    models,
    nightly,
    plan,
    publish,
    quantize,
    recipes,
    report,
    run,
    schema,
    search,
    serve,
)

ALL = (
    recipes, models, quantize, eval, serve, run, compare, search, publish, nightly, report, plan,
    advise, schema, clean_cache,
)  # fmt: skip
