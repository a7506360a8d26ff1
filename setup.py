"""The wheel carries the built guide: build_py also builds docs/ with MkDocs into fatstudio/guide (mkdocs.yml),
so Help → Guide opens it offline. An editable install builds nothing here: the app builds a checkout's guide
into the cache on first use (fatstudio.core.guide)."""
import os
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithGuide(build_py):
    def run(self):
        super().run()
        if self.editable_mode or not Path("mkdocs.yml").is_file():
            return
        from mkdocs.commands.build import build
        from mkdocs.config import load_config

        os.environ.setdefault("NO_MKDOCS_2_WARNING", "1")
        build(load_config("mkdocs.yml", site_dir=str(Path(self.build_lib) / "fatstudio" / "guide")))


if __name__ == "__main__":  # as setuptools runs it (tests/core/test_guide.py imports it)
    setup(cmdclass={"build_py": BuildPyWithGuide})
