"""The Buraco gRPC services: `common` (the frame every service runs in) and one package per service."""
