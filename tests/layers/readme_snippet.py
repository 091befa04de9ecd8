"""The README's `CosineAttention` example, taken from README.md itself so the docs cannot drift.

Executed once per process: it registers the class with Keras, and a second
execution would register a second class under the same name.
"""

import functools
import pathlib
import re

README = pathlib.Path(__file__).resolve().parents[2] / "README.md"


@functools.cache
def readme_cosine_attention():
    """The README's fenced example containing `class CosineAttention(MultiHeadAttention)`, run;
    returns its namespace (`CosineAttention`, `block`, ...)."""
    fences = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    examples = [code for code in fences if "class CosineAttention(MultiHeadAttention)" in code]
    assert len(examples) == 1, f"README.md has {len(examples)} CosineAttention examples, expected 1"
    namespace = {"__name__": "readme_example"}
    exec(compile(examples[0], f"{README}:CosineAttention", "exec"), namespace)
    return namespace
