package memory

import "github.com/gobridge/gobridge/stores"

// entry is one record held by the store. Live entries (pending or claimed)
// are linked into their partition's list in Seq order.
type entry struct {
	rec        stores.Record
	prev, next *entry
	list       *list
}

// list is an intrusive doubly linked list of entries in Seq order. Appends go
// to the back (Seq only grows), so the list stays sorted.
type list struct {
	head, tail *entry
}

func (l *list) pushBack(e *entry) {
	e.list = l
	e.prev, e.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = e
	} else {
		l.head = e
	}
	l.tail = e
}

func (l *list) remove(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		l.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next, e.list = nil, nil, nil
}
