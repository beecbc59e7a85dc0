"""The registry of task families: name -> ``Family`` (each module adds its own)."""

from envs.code_tasks.families import basics, lists, numbers, records, strings
from envs.code_tasks.spec import Family

FAMILIES: dict[str, Family] = {
    family.name: family for module in (basics, strings, lists, numbers, records) for family in module.FAMILIES
}
