package node

// reload re-reads the configuration (SIGHUP) and applies what may change
// while running: in cluster mode the trust map, validated with the self rule
// before it replaces the old one (identity.Store.Replace keeps the old map
// on any error), so a replacement node is admitted without restarting the
// others. Everything else in the new config is ignored, and said so.
func (n *server) reload(read func() (Config, error)) {
	if read == nil {
		n.log.Warn("reload requested but this node has no config source to re-read")
		return
	}
	cfg, err := read()
	if err != nil {
		n.log.Error("reload refused: the configuration does not load; the running one stays", "err", err)
		return
	}
	n.mode.reload(cfg)
}
