"""DECODE contradiction detection: pairing and verdict (`pairing`, torch-free), the NLI pair
classifier (`classifier`), the Ray-free detector (`engine`) and the HTTP schemas of
POST /v1/contradiction (`protocol`)."""
