"""What publish is asked, typed once at the door (cli/commands/publish.py): where to (the
target, parsed: a hub repo or a local folder) and how."""

from dataclasses import dataclass

from pipeline.publish.target import Target


@dataclass(frozen=True)
class PublishRequest:
    target: Target
    dry_run: bool = False  # write the card and the file list only
    private: bool = False  # create the hub repo private
    branch: str | None = None  # push to this branch (created if missing)
    create_pr: bool = False  # open a pull request instead
    ignore_gates: bool = False  # publish although stages are missing or a gate failed
    without_serve: bool = False  # a run not served (a host that cannot): the card says so
    take_over: bool = False  # add to a repo / folder that this pipeline did not publish
