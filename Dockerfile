# The manager's image: one static binary, run as a non-root user, nothing
# else (no shell, no package manager, no CA bundle: it talks only to the API
# server, whose CA the service account mount provides).
#
# hack/build-image.sh (`make image`) builds the binary and then this file
# with the binary as the whole build context, so the image is the same
# bytes for the same source: the binary is built with -trimpath and no build
# ID, and podman stamps every timestamp as 0.
FROM scratch
COPY manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
