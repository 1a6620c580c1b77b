"""The reference documentation, generated from the code so it cannot drift from it.

- `cli`: every command and option, walked from the click tree (Markdown pages and man pages);
- `sitekeys`: every site.toml key with its type, default and description, walked from the
  pydantic models (the description is the field's `description=`, else the comment above or
  beside the field in its model's source);
- `catalog`: metrics, alerts with their runbooks, drain-reason forms, exit codes, files, ports;
- `pages`: all of the above as the pages the MkDocs site shows (slurmadm/docgen/mkdocs_hook.py adds them
  at build time; nothing generated is committed).

Nothing here is imported by a command's normal run; `slurmadm deploy --head` imports `man`.
"""
