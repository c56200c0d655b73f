"""Validates CycloneDX 1.6 JSON documents by cyclonedx-python-lib's strict
JSON-schema validator (not this project's code).
Usage: python cyclonedx-validate.py BOM.json...
Exit 0 when all are valid; 1 naming the first that is not."""
import sys
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

validator = JsonStrictValidator(SchemaVersion.V1_6)
for path in sys.argv[1:]:
    error = validator.validate_str(open(path).read())
    if error:
        print(f"{path}: {error}")
        sys.exit(1)
    print(f"valid {path}")
