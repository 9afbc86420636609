// Package conformancesvc implements the test-only toolmesh.conformance.v1
// contract: the fixtures the official MCP conformance suite calls by name
// (make conformance, docs/testing.md). toolmesh built with -tags conformance
// serves it as the "conformance" domain, so the suite meets them through the
// real edge and pipeline: what reaches the suite — content blocks, progress
// and log notifications, questions to the user, resources, prompts — is the
// edge's rendering of this service's answers, as it renders any domain's.
//
// The texts and media are the suite's reference fixtures'.
package conformancesvc

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"connectrpc.com/connect"

	"github.com/toolmesh/toolmesh/internal/paging"
	"github.com/toolmesh/toolmesh/internal/server"
	conformancev1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/conformance/v1"
	"github.com/toolmesh/toolmesh/proto/gen/toolmesh/conformance/v1/conformancev1connect"
	toolv1 "github.com/toolmesh/toolmesh/proto/gen/toolmesh/tool/v1"
)

// Media of the fixtures: a one-pixel PNG and a short WAV.
var (
	PNG = mustBase64("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg==")
	WAV = mustBase64("UklGRiYAAABXQVZFZm10IBAAAAABAAEAQB8AAAB9AAACABAAZGF0YQIAAAA=")
)

// Texts the suite's reference fixtures answer with.
const (
	SimpleText   = "This is a simple text response for testing."
	ErrorText    = "This tool intentionally returns an error for testing"
	EmbeddedText = "This is an embedded resource content."
	StaticText   = "This is the content of the static text resource."
	WatchedText  = "This is the content of the watched resource."
)

// templateItems are the ids the template resource lists.
var templateItems = []string{"123", "456", "789"}

func mustBase64(s string) []byte {
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		panic(err)
	}
	return b
}

// Service implements toolmesh.conformance.v1.ConformanceService.
type Service struct {
	conformancev1connect.UnimplementedConformanceServiceHandler
}

var _ conformancev1connect.ConformanceServiceHandler = (*Service)(nil)

// New returns the service.
func New() *Service { return &Service{} }

// Server describes the service for internal/server.
func (s *Service) Server() server.Service {
	return server.Register(conformancev1connect.ConformanceServiceName, conformancev1connect.ConformanceServiceHandler(s),
		conformancev1connect.NewConformanceServiceHandler, nil)
}

// Text is a text block.
func Text(s string) *toolv1.Content { return &toolv1.Content{Block: &toolv1.Content_Text{Text: s}} }

// Image is an image block.
func Image(data []byte, mime string) *toolv1.Content {
	return &toolv1.Content{Block: &toolv1.Content_Image{Image: &toolv1.Media{Data: data, MimeType: mime}}}
}

// Audio is an audio block.
func Audio(data []byte, mime string) *toolv1.Content {
	return &toolv1.Content{Block: &toolv1.Content_Audio{Audio: &toolv1.Media{Data: data, MimeType: mime}}}
}

// Resource is an embedded text resource block.
func Resource(uri, mime, text string) *toolv1.Content {
	return &toolv1.Content{Block: &toolv1.Content_Resource{Resource: &toolv1.EmbeddedResource{
		Uri: uri, MimeType: mime, Contents: &toolv1.EmbeddedResource_Text{Text: text}}}}
}

func blocks(b ...*toolv1.Content) []*toolv1.Content { return b }

// SimpleText implements ConformanceService.SimpleText.
func (s *Service) SimpleText(context.Context, *conformancev1.SimpleTextRequest) (*conformancev1.SimpleTextResponse, error) {
	return &conformancev1.SimpleTextResponse{Content: blocks(Text(SimpleText))}, nil
}

// ImageContent implements ConformanceService.ImageContent.
func (s *Service) ImageContent(context.Context, *conformancev1.ImageContentRequest) (*conformancev1.ImageContentResponse, error) {
	return &conformancev1.ImageContentResponse{Content: blocks(Image(PNG, "image/png"))}, nil
}

// AudioContent implements ConformanceService.AudioContent.
func (s *Service) AudioContent(context.Context, *conformancev1.AudioContentRequest) (*conformancev1.AudioContentResponse, error) {
	return &conformancev1.AudioContentResponse{Content: blocks(Audio(WAV, "audio/wav"))}, nil
}

// EmbeddedResource implements ConformanceService.EmbeddedResource.
func (s *Service) EmbeddedResource(_ context.Context, req *conformancev1.EmbeddedResourceRequest) (*conformancev1.EmbeddedResourceResponse, error) {
	uri := req.GetUri()
	if uri == "" {
		uri = "test://embedded-resource"
	}
	return &conformancev1.EmbeddedResourceResponse{Content: blocks(Resource(uri, "text/plain", EmbeddedText))}, nil
}

// MultipleContentTypes implements ConformanceService.MultipleContentTypes.
func (s *Service) MultipleContentTypes(context.Context, *conformancev1.MultipleContentTypesRequest) (*conformancev1.MultipleContentTypesResponse, error) {
	return &conformancev1.MultipleContentTypesResponse{Content: blocks(
		Text("Multiple content types test:"),
		Image(PNG, "image/png"),
		Resource("test://mixed-content-resource", "application/json", `{"test":"data","value":123}`),
	)}, nil
}

// ErrorHandling implements ConformanceService.ErrorHandling.
func (s *Service) ErrorHandling(context.Context, *conformancev1.ErrorHandlingRequest) (*conformancev1.ErrorHandlingResponse, error) {
	//lint:ignore ST1005 the suite's reference text
	return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New(ErrorText))
}

// StaticText implements ConformanceService.StaticText.
func (s *Service) StaticText(context.Context, *conformancev1.StaticTextRequest) (*conformancev1.StaticTextResponse, error) {
	return &conformancev1.StaticTextResponse{Content: blocks(Resource("test://static-text", "text/plain", StaticText))}, nil
}

// StaticBinary implements ConformanceService.StaticBinary.
func (s *Service) StaticBinary(context.Context, *conformancev1.StaticBinaryRequest) (*conformancev1.StaticBinaryResponse, error) {
	return &conformancev1.StaticBinaryResponse{Content: blocks(Image(PNG, "image/png"))}, nil
}

// WatchedResource implements ConformanceService.WatchedResource.
func (s *Service) WatchedResource(context.Context, *conformancev1.WatchedResourceRequest) (*conformancev1.WatchedResourceResponse, error) {
	return &conformancev1.WatchedResourceResponse{Content: blocks(Resource("test://watched-resource", "text/plain", WatchedText))}, nil
}

// TemplateData implements ConformanceService.TemplateData.
func (s *Service) TemplateData(_ context.Context, req *conformancev1.TemplateDataRequest) (*conformancev1.TemplateDataResponse, error) {
	id := req.GetId()
	data := fmt.Sprintf(`{"id":%q,"templateTest":true,"data":"Data for ID: %s"}`, id, id)
	return &conformancev1.TemplateDataResponse{Content: blocks(Resource("test://template/"+id+"/data", "application/json", data))}, nil
}

// ListTemplateItems implements ConformanceService.ListTemplateItems.
func (s *Service) ListTemplateItems(_ context.Context, req *conformancev1.ListTemplateItemsRequest) (*conformancev1.ListTemplateItemsResponse, error) {
	offset, limit := int(req.GetOffset()), paging.Limit(req.GetLimit())
	var items []*conformancev1.TemplateItem
	for i := offset; i < offset+limit && i < len(templateItems); i++ {
		items = append(items, &conformancev1.TemplateItem{Id: templateItems[i]})
	}
	return &conformancev1.ListTemplateItemsResponse{Items: items, Page: paging.New(offset, limit, len(templateItems))}, nil
}
