"""The analysis groups runs by the same rule as the trainer: the keys a resume may change without permission
(`config_change_needs_permission` in src/config/config_load.cpp) are the layout keys of settings.py, and no other."""
import re
from pathlib import Path

from t5scale_analyze import settings

CONFIG_LOAD = Path(__file__).resolve().parents[2] / "src" / "config" / "config_load.cpp"


def _string_list(source: str, name: str) -> set:
    found = re.search(name + r"\s*=\s*\{(.*?)\};", source, re.S)
    assert found, f"{CONFIG_LOAD}: no list {name}"
    return set(re.findall(r'"([^"]+)"', found.group(1)))


def test_layout_keys_are_the_trainers_free_keys():
    source = CONFIG_LOAD.read_text()
    free_sections = _string_list(source, "free_sections")
    free_keys = _string_list(source, "free_keys")
    assert free_sections and free_keys
    assert {"cfg." + s for s in free_sections} == set(settings.LAYOUT_SECTIONS)
    assert {"cfg." + k for k in free_keys} == set(settings.LAYOUT_KEYS)
