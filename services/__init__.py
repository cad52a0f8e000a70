"""The Buraco gRPC services: `common` (the frame every service runs in) and one package per service.

Importing a package of the suite never changes the process: what a process needs set before
anything else (gRPC's transport, `services.common.transport`) its entry point does explicitly.
"""
