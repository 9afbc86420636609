package toolcatalog

import (
	"fmt"
	"regexp"
	"text/template"

	"google.golang.org/protobuf/reflect/protoreflect"

	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Task is the work a long_running tool starts, as an MCP task (the tool
// option's task block, checked against the contracts): the tools that read
// and cancel it, and how its status reads as an MCP task status.
type Task struct {
	// IDPrefix starts the work's task ids: "<prefix>/<agent>/<id>".
	IDPrefix string
	// Get and Cancel show and cancel the work, taking its id in IDField.
	Get, Cancel *Tool
	IDField     string
	// ItemField is the response field of the start, get and cancel tools
	// holding the work.
	ItemField string
	// TaskID, Status, Created and Updated are the work's fields: its task
	// id, its status enum, when it started and when it last changed.
	TaskID, Status, Created, Updated protoreflect.FieldDescriptor
	// States says what each status value means.
	States map[protoreflect.EnumNumber]TaskStatus
}

// TaskStatus is what one status value of the work means as an MCP task.
type TaskStatus struct {
	State toolv1.TaskState
	// Message renders the task's statusMessage from the work's fields by
	// name (see TaskFields).
	Message *template.Template
}

var taskPrefixRE = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)

// bindTask checks t's task option against the registry and sets t.Task.
func (r *Registry) bindTask(t *Tool, opt *toolv1.Task) error {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("tool %q: task: %s", t.Name, fmt.Sprintf(format, args...))
	}
	if t.Wait == nil {
		return fail("only a long_running tool with an optional int32 wait_seconds request field starts a task")
	}
	if !taskPrefixRE.MatchString(opt.GetIdPrefix()) {
		return fail("id_prefix %q is not a lower-case word", opt.GetIdPrefix())
	}
	task := &Task{IDPrefix: opt.GetIdPrefix(), IDField: opt.GetIdField(), ItemField: opt.GetItemField(), States: map[protoreflect.EnumNumber]TaskStatus{}}
	var ok bool
	if task.Get, ok = r.byName[opt.GetGetTool()]; !ok || task.Get.Kind != toolv1.Kind_KIND_READ {
		return fail("get_tool %q is not a READ tool of the same registry", opt.GetGetTool())
	}
	if task.Cancel, ok = r.byName[opt.GetCancelTool()]; !ok {
		return fail("cancel_tool %q is not a tool of the same registry", opt.GetCancelTool())
	}
	for _, u := range []*Tool{task.Get, task.Cancel} {
		if fd := u.Method.Input().Fields().ByName(protoreflect.Name(task.IDField)); fd == nil || fd.Kind() != protoreflect.StringKind || fd.IsList() {
			return fail("id_field %q is not a string field of %s", task.IDField, u.Method.Input().FullName())
		}
	}
	var item protoreflect.MessageDescriptor
	for _, u := range []*Tool{t, task.Get, task.Cancel} {
		fd := u.Method.Output().Fields().ByName(protoreflect.Name(task.ItemField))
		if fd == nil || fd.Message() == nil || fd.IsList() || fd.IsMap() {
			return fail("item_field %q is not a message field of %s", task.ItemField, u.Method.Output().FullName())
		}
		if item != nil && fd.Message().FullName() != item.FullName() {
			return fail("item_field %q holds %s in %s but %s in %s", task.ItemField, item.FullName(), t.Method.Output().FullName(), fd.Message().FullName(), u.Method.Output().FullName())
		}
		item = fd.Message()
	}
	field := func(role, name string, ok func(protoreflect.FieldDescriptor) bool) (protoreflect.FieldDescriptor, error) {
		fd := item.Fields().ByName(protoreflect.Name(name))
		if fd == nil || fd.IsList() || fd.IsMap() || !ok(fd) {
			return nil, fail("%s %q is not a field of %s of the right type", role, name, item.FullName())
		}
		return fd, nil
	}
	isString := func(fd protoreflect.FieldDescriptor) bool { return fd.Kind() == protoreflect.StringKind }
	isEnum := func(fd protoreflect.FieldDescriptor) bool { return fd.Kind() == protoreflect.EnumKind }
	isTime := func(fd protoreflect.FieldDescriptor) bool {
		return fd.Message() != nil && fd.Message().FullName() == "google.protobuf.Timestamp"
	}
	var err error
	if task.TaskID, err = field("task_id_field", opt.GetTaskIdField(), isString); err != nil {
		return err
	}
	if task.Status, err = field("status_field", opt.GetStatusField(), isEnum); err != nil {
		return err
	}
	if task.Created, err = field("created_field", opt.GetCreatedField(), isTime); err != nil {
		return err
	}
	if task.Updated, err = field("updated_field", opt.GetUpdatedField(), isTime); err != nil {
		return err
	}
	values := task.Status.Enum().Values()
	for _, st := range opt.GetStatuses() {
		v := values.ByName(protoreflect.Name(st.GetValue()))
		switch {
		case v == nil || v.Number() == 0:
			return fail("status %q is not a value of %s", st.GetValue(), task.Status.Enum().FullName())
		case st.GetState() == toolv1.TaskState_TASK_STATE_UNSPECIFIED:
			return fail("status %q has no state", st.GetValue())
		}
		if _, dup := task.States[v.Number()]; dup {
			return fail("status %q is mapped twice", st.GetValue())
		}
		msg, err := template.New(st.GetValue()).Option("missingkey=zero").Parse(st.GetMessage())
		if err != nil {
			return fail("status %q: message: %v", st.GetValue(), err)
		}
		task.States[v.Number()] = TaskStatus{State: st.GetState(), Message: msg}
	}
	for i := 0; i < values.Len(); i++ {
		if v := values.Get(i); v.Number() != 0 && task.States[v.Number()].Message == nil {
			return fail("status value %s has no state", v.Name())
		}
	}
	for _, other := range r.tools {
		if other.Task != nil && other.Task.IDPrefix == task.IDPrefix {
			return fail("id_prefix %q is also %q's", task.IDPrefix, other.Name)
		}
	}
	t.Task = task
	return nil
}
