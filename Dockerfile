# The manager's image: a static binary on distroless, as a non-root user.
# (This repository's build machines have no container engine; the image is
# built by whoever publishes it: `docker build -t IMAGE .`)
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY api/ api/
COPY cmd/ cmd/
COPY ipspace/ ipspace/
COPY ledger/ ledger/
COPY reconcilers/ reconcilers/
COPY statuscalc/ statuscalc/
COPY webhooks/ webhooks/
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o /manager ./cmd/manager

FROM gcr.io/distroless/static:nonroot
COPY --from=build /manager /manager
USER 65532:65532
ENTRYPOINT ["/manager"]
