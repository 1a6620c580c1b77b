"""MkDocs hook (mkdocs.yml `hooks:`): adds the reference pages generated from the code to the
build, and one nav entry per command group, so a new command group or site key shows up in the
site without anyone editing mkdocs.yml. A how-to page (docs/how-to/*.md) the nav does not list
yet is added at the end of the how-to section, titled by its first heading."""

from __future__ import annotations

from mkdocs.structure.files import File

_PAGES: dict[str, str] = {}


def _pages() -> dict[str, str]:
    if not _PAGES:
        from slurmadm.docgen.pages import all_pages

        _PAGES.update(all_pages())
    return _PAGES


def _fill_nav(nav, groups: list[dict]) -> bool:
    """Put the command-group pages right after `reference/cli/index.md` in the nav."""
    if isinstance(nav, list):
        for i, item in enumerate(nav):
            if item == "reference/cli/index.md" or (isinstance(item, dict) and "reference/cli/index.md" in item.values()):
                nav[i + 1:i + 1] = groups
                return True
            if isinstance(item, dict) and any(_fill_nav(v, groups) for v in item.values()):
                return True
    return False


def _listed(nav) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, list):
        return set().union(*[_listed(i) for i in nav]) if nav else set()
    if isinstance(nav, dict):
        return set().union(*[_listed(v) for v in nav.values()]) if nav else set()
    return set()


def _section_with(nav, page: str):
    """The nav list that holds `page` (directly), or None."""
    if isinstance(nav, list):
        for item in nav:
            if item == page or (isinstance(item, dict) and page in item.values()):
                return nav
            if isinstance(item, dict):
                for v in item.values():
                    found = _section_with(v, page)
                    if found is not None:
                        return found
    return None


def _add_howtos(config) -> None:
    from pathlib import Path

    nav = config.get("nav")
    section = _section_with(nav, "how-to/install.md") if nav else None
    if section is None:
        return
    listed = _listed(nav)
    for path in sorted(Path(config["docs_dir"], "how-to").glob("*.md")):
        rel = f"how-to/{path.name}"
        if rel in listed:
            continue
        title = next((line[2:].strip() for line in path.read_text().splitlines() if line.startswith("# ")),
                     path.stem.replace("-", " "))
        section.append({title: rel})


def on_config(config, **kwargs):
    _PAGES.clear()
    _add_howtos(config)
    groups = [{f"slurmadm {p[len('reference/cli/'):-3]}": p} for p in _pages()
              if p.startswith("reference/cli/") and not p.endswith("/index.md")]
    if config.get("nav"):
        _fill_nav(config["nav"], groups)
    return config


def on_files(files, config, **kwargs):
    for path, text in _pages().items():
        if files.get_file_from_path(path) is None:
            files.append(File.generated(config, path, content=text))
    return files
