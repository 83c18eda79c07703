# The locksuite CLI in an image of its own: a static binary (CGO_ENABLED=0)
# on an empty base, for running locksuite as a pod or a CI job container:
#
#   docker build -t locksuite .
#   docker run --rm locksuite help
#
# The image has no lock servers: point the CLI at your services (the
# variables README.md lists). The harness makes images of the same kind
# without a Docker engine (harness/kubeimage); harness/kubeimage's
# TestDockerfile runs this file's build line and checks its stages.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/locksuite ./cmd/locksuite

FROM scratch
COPY --from=build /out/locksuite /locksuite
ENTRYPOINT ["/locksuite"]
