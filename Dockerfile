# syntax=docker/dockerfile:1
# One image for the history, matching, timer and visibility services, the `kadence` CLI and
# workers. The entrypoint is the CLI, so the arguments select what runs:
#   docker build -t kadence:0.1.0 .
#   docker run kadence:0.1.0 serve history          # or matching, timer, visibility
#   docker run kadence:0.1.0 audit replay --json    # any kadence command
#   docker run --entrypoint python kadence:0.1.0 -m examples.order worker
# tests/test_image.py lints this file and runs its install steps on the test machine.

FROM python:3.11.13-slim-bookworm AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY kadence kadence
COPY services services
COPY schemas schemas
# The project and every runtime dependency as wheels, so the final stage installs offline.
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:3.11.13-slim-bookworm
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    KADENCE_HTTP_PORT=8080
RUN groupadd --system --gid 10001 kadence \
    && useradd --system --uid 10001 --gid kadence --no-create-home --shell /usr/sbin/nologin kadence
# The wheels are mounted from the build stage, not copied: no layer keeps them.
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels /wheels/kadence-*.whl
WORKDIR /app
# The example workers (deploy/ runs the order worker; your own worker image adds its code
# likewise) and the benchmarks (to measure a deployment from one of its pods).
COPY examples examples
COPY bench bench
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["kadence"]
CMD ["--help"]
