# tckclk-agent FROM scratch, with ticketctl as its health probe (the same
# `ticketctl health` against the agent's own /readyz: ready only while
# synced=1). Built by deploy/docker/build.sh from static binaries made on
# the host (CGO_ENABLED=0): nothing is pulled.
#
#   docker run tckclk/agent:dev --config /etc/tckclk/agent.yaml
#
# Sources on a time host: --kernel reads adjtimex (no capability needed to
# read); --chrony unix:///run/chrony/chronyd.sock needs the host's
# /run/chrony mounted and write access to the socket, or use
# udp://HOST:323; --ptp4l needs ptp4l's socket mounted. --dev (a development
# reference) listens on loopback only: only containers sharing the agent's
# network namespace reach it (deploy/compose).
FROM scratch
COPY tckclk-agent ticketctl /usr/local/bin/
USER 65532:65532
# TCKCLK/2 and the ops HTTP (/metrics /livez /readyz /v1/status).
EXPOSE 7970/tcp 7971/tcp
# The probe reads TICKETCTL_ADDR: the agent's --http address.
ENV TICKETCTL_ADDR=http://127.0.0.1:7971
HEALTHCHECK --interval=5s --timeout=4s --start-period=30s --retries=3 \
	CMD ["/usr/local/bin/ticketctl", "--timeout", "3s", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/tckclk-agent"]
CMD ["--config", "/etc/tckclk/agent.yaml"]
