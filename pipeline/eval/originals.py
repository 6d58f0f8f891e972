"""The original's side of an eval, as it is stored and found again: the references of both
splits, the held-out noise floor and the answers, each named by what made it, without torch.
The stage looks each up before it loads the original; a plan asks whether all are there (its
time is then the artifact's side alone)."""

from dataclasses import dataclass
from pathlib import Path

from pipeline.config.recipe import Calibration, EvalSettings
from pipeline.data import texts
from pipeline.engines import engine_identity
from pipeline.eval import answers, floor, reference_key

SPLITS = ("heldout", "calibration")


@dataclass(frozen=True)
class Originals:
    identity: dict  # the original model's (pipeline/models/aliases.py materialize)
    settings: EvalSettings
    calibration: Calibration  # the calibration split is the quantize's text
    backend: str
    folder: Path  # <runs>/<model>/original/reference

    def window_source(self) -> list:
        """What the windows are made from: the model (its tokenizer), the texts, their sizes."""
        s = self.settings
        texts_sha = {split: self._source_sha(split) for split in SPLITS}
        return [self.identity, texts_sha, s.context_length, s.max_tokens]

    def _source_sha(self, split: str) -> str:
        s = self.settings if split == "heldout" else self.calibration
        chat = split != "heldout" and self.calibration.chat_template
        column = "messages" if chat else s.text_column
        return texts.source_sha(s.dataset, s.config_name, s.split, column)

    def keys(self, prints: dict) -> dict[str, str]:
        """Each split's reference key from its windows' fingerprint; the device, dtype and build
        too: a CPU float32 reference is not a GPU bf16 one."""
        engine = engine_identity.identity(self.backend)
        return {split: reference_key.key(self.identity, fp, self.settings, engine)
                for split, fp in prints.items()}  # fmt: skip

    @staticmethod
    def reference_names(keys: dict[str, str]) -> dict[str, str]:
        return {split: f"{split}-{key}" for split, key in keys.items()}

    def answer_names(self) -> dict[int, str]:
        """The original's answers at each batch size, by name (none without generation)."""
        g = self.settings.generation
        if not g.enabled:
            return {}
        engine = engine_identity.identity(self.backend)
        return {b: answers.name(self.identity, g, engine, b)
                for b in (answers.BATCH, answers.FLOOR_BATCH)}  # fmt: skip

    def all_stored(self) -> bool | None:
        """Whether every part is stored already, as a later recipe's eval of the model finds
        them: from the remembered window prints, never tokenizing (none remembered: none built
        here). None where a split's texts are a hub data set (hashing them means loading them)."""
        s, cal = self.settings, self.calibration
        if not (texts.hashed_offline(s.dataset, s.split)
                and texts.hashed_offline(cal.dataset, cal.split)):  # fmt: skip
            return None
        prints = reference_key.recall(self.window_source())
        if not prints:
            return False
        keys = self.keys(prints)
        paths = [reference_key.stored(self.folder, n) for n in self.reference_names(keys).values()]
        paths.append(floor.stored(self.folder, keys["heldout"]))
        paths += [answers.stored(self.folder, n) for n in self.answer_names().values()]
        return all(path.is_file() for path in paths)
