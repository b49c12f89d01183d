package main

// A source is the wakeup source the waiters share. The emitter makes events
// ready on one side; the waiters take them on the other.
type source interface {
	// fd is the descriptor waiter i adds to its epoll instance.
	fd(i int) int
	// emit makes one event ready. EAGAIN means the source is full for now.
	emit() error
	// take consumes one event from fd, which epoll reported readable. It
	// reports false, with no error, if another waiter got there first.
	take(fd int) (bool, error)
	close() error
}

// openSource opens the source cfg names: one for all waiters, except in
// reuseport mode, where each waiter gets a listener of its own.
func openSource(cfg config) (source, error) {
	switch cfg.source {
	case sourcePipe:
		s, err := newPipeSource()
		if err != nil {
			return nil, err
		}
		return s, nil
	case sourceAccept:
		listeners := 1
		if cfg.mode == modeReusePort {
			listeners = cfg.waiters
		}
		s, err := newAcceptSource(listeners)
		if err != nil {
			return nil, err
		}
		return s, nil
	}
	panic("herd: unchecked source " + cfg.source)
}
