"""Validates in-toto Statements v1 and their predicates by the
in-toto-attestation package (not this project's code): the statement and
the predicate are parsed into the spec's protobuf messages strictly (an
unknown field is an error) and the statement's own validate() runs.
Usage: python intoto-validate.py STATEMENT.json...
Exit 0 when all are valid; 1 naming the first that is not."""
import json, sys
from google.protobuf import json_format
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.statement import Statement
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.predicates.test_result.v0 import test_result_pb2

PREDICATES = {
    "https://slsa.dev/provenance/v1": provenance_pb2.Provenance,
    "https://in-toto.io/attestation/test-result/v0.1": test_result_pb2.TestResult,
}
for path in sys.argv[1:]:
    try:
        doc = json.load(open(path))
        pb = json_format.Parse(json.dumps(doc), statement_pb2.Statement())
        Statement.copy_from_pb(pb).validate()
        kind = PREDICATES[doc["predicateType"]]
        json_format.Parse(json.dumps(doc["predicate"]), kind())
    except Exception as e:
        print(f"{path}: {type(e).__name__}: {e}")
        sys.exit(1)
    print(f"valid {path} ({doc['predicateType']})")
