"""The gateway's error handlers: the shared ones in :mod:`dialscore_server.contract.http_errors`
(where the batch runner, which must not import the gateway, reads them too), re-exported here."""

from dialscore_server.contract.http_errors import (  # noqa: F401 - re-exported
    error_response, error_response_bytes, from_validation, install, internal_error_response,
    loc_to_param, logger)
