# ticketd (and ticketctl, its client and health probe) FROM scratch.
# Built by deploy/docker/build.sh from static binaries made on the host
# (CGO_ENABLED=0): nothing is pulled. The image holds the two binaries, an
# empty data directory owned by the runtime user, and nothing else: no
# shell, no libc, no CA bundle (internode TLS names its own CA file).
#
#   docker run tckclk/ticketd:dev --config /etc/ticketd/ticketd.yaml
#
# Every config key is also a flag (`--cluster.membership.bind_addr IP`).
# Secrets are files mounted read-only, owned by 65532 with mode 0400/0600
# (ticketd refuses group- or world-readable secrets); see deploy/compose.
FROM scratch
COPY ticketd ticketctl /usr/local/bin/
# The data directory: a volume mounted here starts owned by 65532.
COPY --chown=65532:65532 empty/ /var/lib/ticketd/
USER 65532:65532
# API, gossip (TCP and UDP), the internode mesh (auto-picked in 7950–7959).
EXPOSE 7980/tcp 7946/tcp 7946/udp 7950-7959/tcp
VOLUME /var/lib/ticketd
# The probe reads TICKETCTL_ADDR: set it to the API's address when api.addr
# is not on port 7980 (https: mount a CA and add --ca-file in your own image).
ENV TICKETCTL_ADDR=http://127.0.0.1:7980
# Ready means /readyz 200: clock_check, mesh, gossip, bootstrap or join,
# uniform, a leader (SPEC §3.5); never a TCP connect. start-period covers
# clock_check and bootstrap_expect.
HEALTHCHECK --interval=5s --timeout=4s --start-period=90s --retries=3 \
	CMD ["/usr/local/bin/ticketctl", "--timeout", "3s", "health"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/ticketd"]
CMD ["--config", "/etc/ticketd/ticketd.yaml"]
