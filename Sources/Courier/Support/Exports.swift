// `import Courier` is enough to use `HTTPRequest`, `HTTPResponse` and `HTTPFields` in signatures.
@_exported import HTTPTypes
