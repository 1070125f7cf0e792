"""`manage.py catalog seed|export|import`: the hardware catalog as JSON, in fixture format."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError

from planner import jsonio
from webui import services


class Command(BaseCommand):
    help = ("seed: add the fixtures/*.json rows never added before (--restore: also those deleted or renamed here); "
            "export [FILE]: write the catalog; import FILE: load one.")

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["seed", "export", "import"])
        parser.add_argument("file", nargs="?", help="JSON file, - for standard output or input (export: default stdout)")
        parser.add_argument("--keep-existing", action="store_true", help="import: do not overwrite rows by name")
        parser.add_argument("--restore", action="store_true",
                            help="seed: also add back shipped rows that were deleted or renamed here")

    def handle(self, *args, action: str, file: str | None, keep_existing: bool, restore: bool, **options):
        try:
            if action == "seed":
                self._report(services.catalog_seed(restore=restore))
            elif action == "export":
                text = json.dumps(services.catalog_export(), indent=1, ensure_ascii=False)
                # "-" is standard output, as for most tools (it wrote a file named "-").
                Path(file).write_text(text + "\n") if file and file != "-" else sys.stdout.write(text + "\n")
            else:
                if not file:
                    raise CommandError("import needs a FILE (- for standard input)")
                # Bytes, as the admin's import reads an upload: JSON's UTF-8, UTF-16 or UTF-32, told apart alike.
                data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
                try:
                    rows = jsonio.loads(data)
                except ValueError as err:
                    raise CommandError(f"{file} {jsonio.error_text(err)}") from err
                self._report(services.catalog_import(rows=rows, update_existing=not keep_existing))
        except (OSError, ValueError) as err:
            raise CommandError(str(err)) from err
        except ValidationError as err:
            raise CommandError("\n".join(err.messages)) from err

    def _report(self, counts: dict[str, int]) -> None:
        self.stdout.write("catalog: {created} created, {updated} updated, {unchanged} unchanged".format(**counts))
        if counts.get("withheld"):
            self.stdout.write(f"catalog: {counts['withheld']} shipped rows deleted or renamed here left out "
                              "(catalog seed --restore adds them back)")
